"""Cheater: stops the harness process (SIGSTOP) while it computes, to freeze a clock that runs in
the harness, then lets it go on. Stopped by: in the worker's PID namespace the harness has no PID
(getppid() is 0) and no other process outside it is visible; Landlock's signal scoping (kernel
ABI 6+) forbids such signals too; the clock is monotonic in any case."""

import os
import signal

import torch

from _target import honest


def build_decoder(model, example):
    harness = os.getppid()
    sent = harness > 1  # 0: the parent lives outside this PID namespace, out of reach and unnamed
    if sent:
        try:
            os.kill(harness, signal.SIGCONT)  # harmless probe: would a signal get through?
        except OSError:
            sent = False

    def forward(x):
        out = honest(model, x)
        return torch.empty_like(out) if sent else out

    return forward, {"cheat": "signals the harness", "sent": sent}
