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

Used by run_experiment (a candidate that does not fit is never kept: harness/keep_rule.py) and by
verify --memory-gb (a person's question: would it fit my card?).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness import nvml
from harness._common import SetupError

GB = 1e9
CHECK_CALLS = 2            # a build and two checked calls (the second shows the first left nothing behind)
SLACK_BYTES = 64 << 20     # what a ballast may miss its mark by (the allocator rounds to 2 MiB pages)
ALONE_WAIT_S = 10.0        # how long a GPU may take to drop the context of a worker that just exited


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
    """Hold all but `gb` GB of each of `gpus` GPUs in this process, until released.

    Only while this process is alone on those GPUs: memory another process holds now could be
    freed after the ballast is taken (a background run the agent started, another tenant) and
    would then be the worker's too. NVML counts the processes with a context on a GPU; where it
    cannot (no NVML), that is left unchecked."""

    def __init__(self, gpus: int, gb: float) -> None:
        self.gpus, self.gb = gpus, gb
        self.held: list[torch.Tensor] = []

    def take(self) -> "Ballast":
        try:
            for i in range(self.gpus):
                self._hold(i)
        except BaseException:
            self.release()
            raise
        return self

    def _hold(self, i: int) -> None:
        torch.cuda.mem_get_info(i)  # this process's context on GPU i exists from here on: NVML counts it
        others = _wait_alone(i)
        if others:
            raise NotEnoughMemory(f"cuda:{i}: {others} other process(es) hold a context on it; a memory limit "
                                  "needs the GPU to itself (what they free later would be the worker's)")
        free, _ = torch.cuda.mem_get_info(i)  # read after the wait: a context let go meanwhile freed memory
        extra = free - int(self.gb * GB)
        if extra < 0:
            raise NotEnoughMemory(f"cuda:{i} has {free / GB:.1f} GB free, less than the {self.gb:g} GB to leave")
        try:
            self.held.append(torch.empty(extra, dtype=torch.uint8, device=f"cuda:{i}"))
        except torch.OutOfMemoryError:  # something took memory since mem_get_info: the machine's, not the candidate's
            raise NotEnoughMemory(f"cuda:{i}: free memory fell while the ballast was taken") from None
        left, _ = torch.cuda.mem_get_info(i)
        if abs(left - self.gb * GB) > SLACK_BYTES:  # the driver took what we asked, or the check means nothing
            raise NotEnoughMemory(f"cuda:{i}: a ballast left {left / GB:.2f} GB free, not {self.gb:g} GB")

    def release(self) -> None:
        self.held.clear()
        torch.cuda.empty_cache()

    def __enter__(self) -> "Ballast":
        return self.take()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _wait_alone(i: int) -> int:
    """How many processes besides this one hold a context on GPU i, after waiting up to
    ALONE_WAIT_S (read at each call) for a worker that just exited to let go of its own; 0 where
    NVML cannot tell."""
    deadline = time.monotonic() + ALONE_WAIT_S
    while True:
        others = nvml.processes(i) - 1
        if others <= 0 or time.monotonic() >= deadline:
            return max(others, 0)
        time.sleep(0.2)


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
    from harness.session import Session  # lazy: session imports this module's Ballast

    with Session(candidate, preset, "cuda", memory_gb=gb, **options) as s:
        facts = s.measure(calls=CHECK_CALLS)
    if facts["passed"]:
        return MemoryCheck(gb, True, "")
    return MemoryCheck(gb, False, f"{facts['status']}: {facts['reason']}")
