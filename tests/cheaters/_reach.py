"""What the isolation cheaters (tests/test_cheaters_isolation.py) share: the worker's own objects,
found from inside (a candidate runs in the worker process, so nothing there is private to it),
and a watcher that computes each call's output as soon as the shared input buffer changes.

Nothing here is an attack by itself; the cheaters that import it are."""

from __future__ import annotations

import gc
import threading
import time

import torch


def worker():
    """The worker's Worker object (it holds the shared buffers, the channel, the configuration)."""
    for obj in gc.get_objects():
        try:
            if type(obj).__name__ == "Worker" and hasattr(obj, "inp") and hasattr(obj, "cfg"):
                return obj
        except ReferenceError:
            continue
    return None


def rewrite_replies(method: str, rewrite) -> str:
    """Patch the worker's Worker.<method> (a request's handler) so that each reply it sends passes
    through `rewrite(reply)`, which changes it in place: what a cheater forges in the worker's word.
    Returns a note for the candidate's info."""
    w = worker()
    if w is None:
        return "no Worker object found"
    cls = type(w)
    real = getattr(cls, method)

    def patched(self):
        reply = real(self)
        rewrite(reply)
        return reply

    setattr(cls, method, patched)
    return f"Worker.{method} patched"


def spin(seconds: float) -> None:
    """Burn CPU (not sleep): an honest cost that also keeps this CPU from anyone else."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Watcher:
    """Polls the shared input buffer from a thread; on a change, pays `cost` (sleep or spin) and
    computes the output with `compute`; `answer(x)` waits for the watcher's result for x."""

    def __init__(self, buffer: torch.Tensor, compute, cost: float, busy: bool = False, cpu: int | None = None) -> None:
        self.buffer, self.compute, self.cost, self.busy, self.cpu = buffer, compute, cost, busy, cpu
        self.done: dict[str, torch.Tensor] = {}
        self.lock = threading.Condition()
        self.head_starts: list[float] = []
        # The buffer as build leaves it, copied here: copied first thing in the thread, it was at times
        # copied after the harness wrote the first call's input, and that call went unseen (answer's 5 s).
        self.last = buffer.clone()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        if self.cpu is not None:
            try:
                import os
                os.sched_setaffinity(0, {self.cpu})  # the thread only (tid 0 = the caller)
            except OSError:
                pass
        last = self.last
        while True:
            if torch.equal(self.buffer, last):
                if not self.busy:
                    time.sleep(0.0002)
                continue
            seen = time.perf_counter()
            snap = self.buffer.clone()
            last = snap
            if self.busy:
                spin(self.cost)
            else:
                time.sleep(self.cost)
            y = self.compute(snap)
            with self.lock:
                self.done = {"x": snap, "y": y, "seen": seen}
                self.lock.notify_all()

    def answer(self, x: torch.Tensor, fallback, wait_s: float = 5.0):
        """The watcher's output for this input (waiting for it if it is on its way), else fallback()."""
        called = time.perf_counter()
        end = called + wait_s
        with self.lock:
            while True:
                d = self.done
                if d and torch.equal(d["x"], x):
                    self.head_starts.append(called - d["seen"])
                    return d["y"].clone()
                left = end - time.perf_counter()
                if left <= 0:
                    break
                self.lock.wait(min(left, 0.01))
        return fallback()
