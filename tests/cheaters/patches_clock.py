"""Cheater: patches every clock it can reach (time.perf_counter, time.monotonic, time.time, and
torch.cuda.Event.elapsed_time) to claim one second less than what passed, and computes honestly
but slowly. The old harness timed the fp32 eager decode at 1.00 s instead of 9.94 s this way.
Stopped by: the clock is read in the harness's process; the test checks the median still holds
the honest cost."""

import time

import torch

from _target import honest

HONEST_COST_S = 0.3
_real = {name: getattr(time, name) for name in ("perf_counter", "monotonic", "time")}


def _fast(name):
    return lambda: _real[name]() - 1.0


def build_decoder(model, example):
    for name in _real:
        setattr(time, name, _fast(name))
    torch.cuda.Event.elapsed_time = lambda self, end: 1.0

    def forward(x):
        time.sleep(HONEST_COST_S)
        return honest(model, x)

    return forward, {"cheat": "patched clocks"}
