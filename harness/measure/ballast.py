"""The memory clause's ballast: all but N GB of each GPU of a preset, held in this process (harness/measure/memory_limit.py)."""

from __future__ import annotations

import time
from typing import Any

import torch


from harness.measure import nvml
from harness.errors import Refused

GB = 1e9
SLACK_BYTES = 64 << 20     # what a ballast may miss its mark by (the allocator rounds to 2 MiB pages)
ALONE_WAIT_S = 10.0        # how long a GPU may take to drop the context of a worker that just exited


class NotEnoughMemory(Refused):
    """The GPU has less free memory than the limit to leave: the check cannot be made here."""


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
