"""Cheater: a correct output with one NaN in it. Stopped by: the gate's finiteness check."""

import math

from _target import honest


def build_decoder(model, example):
    def forward(x):
        out = honest(model, x)
        out[(0,) * out.dim()] = math.nan
        return out

    return forward, {"cheat": "NaN"}
