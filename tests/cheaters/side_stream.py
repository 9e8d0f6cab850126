"""Cheater (CUDA only): computes on a side stream and returns at once, without making the current
stream wait, and patches the worker's synchronize away, so "done" comes while the work still
runs. Stopped by: the harness copies the output buffer as soon as "done" arrives; it holds the
poison (or part of the work), and the gate fails."""

import sys

import torch

from _target import honest


def build_decoder(model, example):
    side = torch.cuda.Stream()
    sys.modules["__main__"].Worker.sync = lambda self: None  # the worker runs as __main__ (python -I harness/worker/main.py)
    shape = honest(model, example).shape

    def forward(x):
        out = torch.full(shape, float("nan"), device=x.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(500_000_000)  # a few hundred ms of spinning before the real work
            out.copy_(honest(model, x))
        return out

    return forward, {"cheat": "side stream without sync"}
