"""Cheater: honest on the first call (a warm-up, or what a gate would check first), empty on the
others, which it takes for timed calls. Stopped by: every call is checked, warm-up included."""

import torch

from _target import honest


def build_decoder(model, example):
    calls = [0]

    def forward(x):
        calls[0] += 1
        out = honest(model, x)
        return out if calls[0] == 1 else torch.empty_like(out)

    return forward, {"cheat": "honest only on the first call"}
