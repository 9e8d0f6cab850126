"""The memory clause: does a candidate decode with only so much GPU memory free?

A worker's own figure of its peak (`max_memory_allocated`, facts["peak_mem_gb"]) is the
candidate's word: code that resets the counter, or frees to the driver between allocations,
reports what it likes. So where a preset names `"memory_gb": N` (goals.json), the harness does not
ask: it holds all but N GB of each GPU of the preset itself (a ballast: memory allocated in this
process, which the sandboxed worker can neither see nor free), then starts a fresh worker of the
candidate, which must build and pass the gate on every call (verify's calls, fresh inputs) in
what is left. N counts everything the worker allocates: its CUDA context, the allocator's cache,
its compilers' workspaces (not the input and output buffers the harness shares with it). A 24 GB
card has more than 24 GB (10^9 bytes) free, so "fits in 24" is the stricter claim. The timed calls run with the whole GPU: a candidate that reads the free
memory and takes a leaner path when it is short fits here with a speed it has only on a large
card (README's limits say so).

Used by run_experiment (a candidate that does not fit is never kept: harness/decide/keep_rule.py) and by
verify --memory-gb (a person's question: would it fit my card?). The ballast is harness/measure/ballast.py's.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.measure.session import Session

CHECK_CALLS = 2            # a build and two checked calls (the second shows the first left nothing behind)


@dataclass(frozen=True)
class MemoryCheck:
    """A candidate's fresh worker with `gb` GB of GPU memory free: did every call pass?"""
    gb: float
    passed: bool
    reason: str            # why not, in one line ("" when it fit)

    def as_fact(self) -> dict[str, Any]:
        return asdict(self)


def gb_argument(text: str) -> float:
    """argparse's type for a command line's GB limit (verify --memory-gb, peers --free-gb)."""
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of GB")
    return value


def check(candidate: Path | str, preset: str, gb: float, **options: Any) -> MemoryCheck:
    """A fresh worker of the candidate, sandboxed as always, with `gb` GB free on each GPU of the
    preset: a build and CHECK_CALLS checked calls. run_experiment runs it before the timed pair,
    while no other worker is alive; the ballast refuses a GPU another process holds."""
    with Session(candidate, preset, "cuda", memory_gb=gb, **options) as s:
        facts = s.measure(calls=CHECK_CALLS)
    if facts["passed"]:
        return MemoryCheck(gb, True, "")
    return MemoryCheck(gb, False, f"{facts['status']}: {facts['reason']}")
