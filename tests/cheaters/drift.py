"""Cheater: a correct output plus noise beyond the gate's tolerance. Stopped by: the gate."""

import torch

from _target import honest


def build_decoder(model, example):
    def forward(x):
        out = honest(model, x)
        return out + 0.05 * torch.randn_like(out)

    return forward, {"cheat": "drifts beyond tolerance"}
