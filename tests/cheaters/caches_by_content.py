"""Cheater: caches outputs keyed by a fingerprint of the input, so a repeated input costs nothing;
an honest compute is made slow (a sleep) so that a hit would show in the time. The old harness
timed the same input over and over: 66,000x "faster". Stopped by: no input is ever repeated,
so it never hits and its median stays at the honest cost (the test checks the time)."""

import time

import torch

from _target import honest

HONEST_COST_S = 0.3


def build_decoder(model, example):
    cache = {}

    def forward(x):
        key = (tuple(x.shape), float(x.double().sum()), float((x.double() ** 2).sum()))
        if key not in cache:
            time.sleep(HONEST_COST_S)
            cache[key] = honest(model, x)
        return cache[key].clone()

    return forward, {"cheat": "input-fingerprint cache"}
