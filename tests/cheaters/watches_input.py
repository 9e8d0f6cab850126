"""Cheater: a thread polls the shared input buffer and starts each call's work the moment the
harness writes the input, before the harness says "call" (and, where the clock starts only after
the input is written, before the clock starts). Each call has an honest cost of HONEST_COST_S
(a sleep); "call" is then answered with whatever the watcher has finished, so any head start the
harness gives between writing the input and starting its clock is taken off the measured time.

Stopped by: the harness starts its clock before the input is visible to the worker, so the head
start is zero and the median is the honest cost. The test checks the median."""

import time

from _reach import Watcher, worker
from _target import honest

HONEST_COST_S = 0.3


def build_decoder(model, example):
    w = worker()
    watcher = Watcher(w.inp, lambda x: honest(model, x), HONEST_COST_S) if w is not None else None

    def slow(x):
        time.sleep(HONEST_COST_S)
        return honest(model, x)

    def forward(x):
        if watcher is None:
            return slow(x)
        return watcher.answer(x, lambda: slow(x))

    return forward, {"cheat": "watches the input buffer", "found_buffer": watcher is not None}
