"""The memory clause: does a candidate decode with only so much GPU memory free?

A worker's own figure of its peak (`max_memory_allocated`, facts["peak_mem_gb"]) is the
candidate's word: code that resets the counter, or frees to the driver between allocations,
reports what it likes. So where a preset names `"memory_gb": N` (goals.json), the harness does not
ask: it holds all but N GB of each GPU of the preset itself (a ballast: memory allocated in this
process, which the sandboxed worker can neither see nor free), then starts a fresh worker of the
candidate, which must build and pass the gate on every call (verify's calls, fresh inputs) in
what is left. N counts everything the worker holds: its CUDA context, the allocator's cache, its
compilers' workspaces. A 24 GB card has more than 24 GB (10^9 bytes) free, so "fits in 24" is
the stricter claim. The timed calls run with the whole GPU: a candidate that reads the free
memory and takes a leaner path when it is short fits here with a speed it has only on a large
card (README's limits say so).

Used by run_experiment (a candidate that does not fit is never kept: harness/keep_rule.py) and by
verify --memory-gb (a person's question: would it fit my card?).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness._common import SetupError

GB = 1e9
CHECK_CALLS = 2            # a build and two checked calls (the second shows the first left nothing behind)
SLACK_BYTES = 64 << 20     # what a ballast may miss its mark by (the allocator rounds to 2 MiB pages)


class NotEnoughMemory(SetupError):
    """The GPU has less free memory than the limit to leave: the check cannot be made here."""


@dataclass(frozen=True)
class MemoryCheck:
    """A candidate's fresh worker with `gb` GB of GPU memory free: did every call pass?"""
    gb: float
    passed: bool
    reason: str            # why not, in one line ("" when it fit)

    def as_fact(self) -> dict[str, Any]:
        return asdict(self)


class Ballast:
    """Hold all but `gb` GB of each of `gpus` GPUs in this process, until closed."""

    def __init__(self, gpus: int, gb: float) -> None:
        self.gpus, self.gb = gpus, gb
        self.held: list[torch.Tensor] = []

    def __enter__(self) -> "Ballast":
        try:
            for i in range(self.gpus):
                free, _ = torch.cuda.mem_get_info(i)
                extra = free - int(self.gb * GB)
                if extra < 0:
                    raise NotEnoughMemory(f"cuda:{i} has {free / GB:.1f} GB free, less than the {self.gb:g} GB to leave")
                self.held.append(torch.empty(extra, dtype=torch.uint8, device=f"cuda:{i}"))
                left, _ = torch.cuda.mem_get_info(i)
                if abs(left - self.gb * GB) > SLACK_BYTES:  # the driver took what we asked, or the check means nothing
                    raise NotEnoughMemory(f"cuda:{i}: a ballast left {left / GB:.2f} GB free, not {self.gb:g} GB")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.held.clear()
        torch.cuda.empty_cache()


def check(candidate: Path | str, preset: str, gb: float, **options: Any) -> MemoryCheck:
    """A fresh worker of the candidate, sandboxed as always, with `gb` GB free on each GPU of the
    preset: a build and CHECK_CALLS checked calls. Run with no other worker alive on those GPUs
    (run_experiment runs it before the timed pair): memory a rival freed later would be the
    candidate's to take."""
    from harness.session import Session  # lazy: session imports this module's Ballast

    with Session(candidate, preset, "cuda", memory_gb=gb, **options) as s:
        facts = s.measure(calls=CHECK_CALLS)
    if facts["passed"]:
        return MemoryCheck(gb, True, "")
    return MemoryCheck(gb, False, f"{facts['status']}: {facts['reason']}")
