"""Cheater: stops the harness process (SIGSTOP) while it computes, to freeze a clock that runs in
the harness, then lets it go on. Stopped by: Landlock's signal scoping (kernel ABI 6+) forbids
signals to processes outside the sandbox; the clock is monotonic in any case."""

import os
import signal

import torch

from _target import honest


def build_decoder(model, example):
    sent = True
    try:
        os.kill(os.getppid(), signal.SIGCONT)  # harmless probe: would a signal get through?
    except OSError:
        sent = False

    def forward(x):
        out = honest(model, x)
        return torch.empty_like(out) if sent else out

    return forward, {"cheat": "signals the harness", "sent": sent}
