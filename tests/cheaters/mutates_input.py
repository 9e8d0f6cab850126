"""Cheater: decodes correctly, then scribbles on its input (scratch space for free). Stopped by:
the harness compares the shared input buffer with its own copy after every call."""

from _target import honest


def build_decoder(model, example):
    def forward(x):
        out = honest(model, x)
        x.mul_(0.5)
        return out

    return forward, {"cheat": "mutates its input"}
