"""Writes a variant of a candidate (argv[1], optimize.py or a variant of it) to argv[2]: e136's change
again (on an H100, +1.0%, 97% CI +0.7..+1.3%: inconclusive), on today's code: the Winograd input and
output transforms' channel blocks of the same tiles neighbours in launch order, so that the programs
running at once read whole pixels and write whole rows (channels last), not one 128-byte piece of each;
the phase convs' input transform too. Each replaced text must occur exactly once."""

import runpy
import sys
from pathlib import Path

write_variant = runpy.run_path(str(Path(__file__).resolve().parent.parent / "_edits.py"))["write_variant"]

EDITS = [
    ("""        u = tl.program_id(1)
        p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
        cb = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)""",
     """        # The channel blocks of the same tiles are neighbours in launch order.
        u, blocks_c = tl.program_id(1), C // BLOCK_C
        p = tl.program_id(0) // blocks_c * BLOCK_P + tl.arange(0, BLOCK_P)
        cb = tl.program_id(0) % blocks_c * BLOCK_C + tl.arange(0, BLOCK_C)"""),
    ("""        r = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
        cb = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        mask = (r < rows_total)[:, None]
        m_ptrs = m_ptr + (r.to(tl.int64) * CO)[:, None] + cb[None, :]""",
     """        # The channel blocks of the same rows are neighbours in launch order.
        blocks_c = CO // BLOCK_C
        r = tl.program_id(0) // blocks_c * BLOCK_P + tl.arange(0, BLOCK_P)
        cb = tl.program_id(0) % blocks_c * BLOCK_C + tl.arange(0, BLOCK_C)
        mask = (r < rows_total)[:, None]
        m_ptrs = m_ptr + (r.to(tl.int64) * CO)[:, None] + cb[None, :]"""),
    ("_input_transform[(triton.cdiv(tiles, in_p), src.shape[0], c // in_c)](",
     "_input_transform[(triton.cdiv(tiles, in_p) * (c // in_c), src.shape[0])]("),
    ("_output_transform[(triton.cdiv(k * tiles, out_p), co // out_c)](",
     "_output_transform[(triton.cdiv(k * tiles, out_p) * (co // out_c),)]("),
    ("_input_transform[(triton.cdiv(tiles, in_p), f, c // in_c)](",
     "_input_transform[(triton.cdiv(tiles, in_p) * (c // in_c), f)]("),
]

write_variant(sys.argv[1], sys.argv[2], EDITS)
