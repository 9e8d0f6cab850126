"""Writes a variant of optimize.py (argv[1]) to argv[2]: the sub-pixel merge kernel's shortcut channel
index in int32 and divided by a constant (REPEATS a tl.constexpr) instead of a per-element int64
division by a runtime value. Each replaced text must occur exactly once.

    python subpixel_constexpr.py optimize.py OUT.py [ELEMENTS WARPS | in-line]

ELEMENTS, WARPS: a program of the merge takes ELEMENTS // C rows (optimize.py: 4096) on WARPS warps (4).
in-line: also, where a program's rows lie in one row of the 2x image (BLOCK_R divides 2 W: every shape of
the 720p decode), the program finds that row's frame and height once (scalars), not per row (int64
divisions by runtime values in each thread)."""

import runpy
import sys
from pathlib import Path

write_variant = runpy.run_path(str(Path(__file__).resolve().parent.parent / "_edits.py"))["write_variant"]

EDITS = [
    ('@triton.jit(do_not_specialize=["rows", "H", "W", "C_SRC", "REPEATS", "T_SHIFT"])',
     '@triton.jit(do_not_specialize=["rows", "H", "W", "C_SRC", "T_SHIFT"])'),
    ("""                         REPEATS, T_SHIFT, C: tl.constexpr, FT: tl.constexpr, NORM: tl.constexpr,
                         BLOCK_R: tl.constexpr):""",
     """                         T_SHIFT, C: tl.constexpr, FT: tl.constexpr, REPEATS: tl.constexpr,
                         NORM: tl.constexpr, BLOCK_R: tl.constexpr):"""),
    ("""        k = c[None, :] * (FT * 4) + ((ts % FT) * 4 + p * 2 + q)[:, None]
        s_row = ((ts // FT) * H + i) * W + j
        y += tl.load(src_ptr + s_row[:, None] * C_SRC + k // REPEATS, mask=mask, other=0.0).to(tl.float32)""",
     """        # The shortcut's channel for channel c of phase ph: (4 FT c + ph) // REPEATS, in int32 and by a
        # constant; where REPEATS divides 4 FT (every upsampling of the Wan 2.2 decoder) the division is
        # a row's, not an element's.
        ph = ((ts % FT) * 4 + p * 2 + q).to(tl.int32)
        if (FT * 4) % REPEATS == 0:
            k = c[None, :] * (FT * 4 // REPEATS) + (ph // REPEATS)[:, None]
        else:
            k = (c[None, :] * (FT * 4) + ph[:, None]) // REPEATS
        s_row = ((ts // FT) * H + i) * W + j
        y += tl.load(src_ptr + s_row[:, None] * C_SRC + k, mask=mask, other=0.0).to(tl.float32)"""),
    ("""            rows, h, w, c_src, c * factor_t * 4 // c_src, factor_t - 1 if first_chunk else 0,
            C=c, FT=factor_t, NORM=norm is not None, BLOCK_R=blk, num_warps=4)""",
     """            rows, h, w, c_src, factor_t - 1 if first_chunk else 0,
            C=c, FT=factor_t, REPEATS=c * factor_t * 4 // c_src, NORM=norm is not None, BLOCK_R=blk, num_warps=4)"""),
]

IN_LINE = [
    ("""                         NORM: tl.constexpr, BLOCK_R: tl.constexpr):
        # One output pixel (t, 2i + p, 2j + q) a row; C channels a row.
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = tl.arange(0, C)
        mask = (r < rows)[:, None]
        r = r.to(tl.int64)
        xx = r % (2 * W)
        yy = (r // (2 * W)) % (2 * H)
        t = r // (4 * H * W)""",
     """                         NORM: tl.constexpr, BLOCK_R: tl.constexpr, IN_LINE: tl.constexpr):
        # One output pixel (t, 2i + p, 2j + q) a row; C channels a row.
        r0 = tl.program_id(0).to(tl.int64) * BLOCK_R
        r = r0 + tl.arange(0, BLOCK_R)
        c = tl.arange(0, C)
        mask = (r < rows)[:, None]
        if IN_LINE:  # the program's rows lie in one row of the 2x image: its frame and height, once
            xx = r0 % (2 * W) + tl.arange(0, BLOCK_R)
            yy = (r0 // (2 * W)) % (2 * H)
            t = r0 // (4 * H * W)
        else:
            xx = r % (2 * W)
            yy = (r // (2 * W)) % (2 * H)
            t = r // (4 * H * W)"""),
    ("NORM=norm is not None, BLOCK_R=blk, num_warps=4)",
     "NORM=norm is not None, BLOCK_R=blk, IN_LINE=(2 * w) % blk == 0, num_warps=4)"),
]
if sys.argv[3:] == ["in-line"]:
    EDITS[3] = (EDITS[3][0], EDITS[3][1].replace(*IN_LINE[1]))
    EDITS.append(IN_LINE[0])
elif len(sys.argv) == 5:
    elements, warps = int(sys.argv[3]), int(sys.argv[4])
    EDITS.append(("""        blk = _rows_block(c)
        _subpixel_kernel[(triton.cdiv(rows, blk),)](""", f"""        blk = max(1, {elements} // c)
        _subpixel_kernel[(triton.cdiv(rows, blk),)]("""))
    EDITS[3] = (EDITS[3][0], EDITS[3][1].replace("num_warps=4", f"num_warps={warps}"))
write_variant(sys.argv[1], sys.argv[2], EDITS)
