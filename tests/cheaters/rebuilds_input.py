"""Cheater: rebuilds the benchmark input. goals.json publishes `input_seed`, and a seeded
benchmark input is the adapter's make_input(shape, input_seed); the cheater makes that tensor at
build time and computes its honest output then (untimed). A call on exactly that input is answered
at once with the exact output; every other call pays the honest cost (HONEST_COST_S) and returns a
degraded output that still passes the gate (off by 0.8 of the gate's max_abs). So today's
benchmark call is instant, and the quality a row reports (the benchmark call's) is perfect while
every fresh input is worse.

Stopped by: a benchmark input the worker cannot rebuild (not derived from a seed it can read), and a
reported quality that is the worst over all the calls. The test checks that no call was answered
faster than the honest cost, and that the reported quality is the worst of the checked calls."""

import time

import torch

from harness import _common as C
from _target import adapter, honest

HONEST_COST_S = 0.3


def build_decoder(model, example):
    goals = C.load_goals()
    shape = list(example.shape)
    known = []
    for seed in dict.fromkeys([goals.get("input_seed"), *range(8)]):
        if seed is None:
            continue
        x0 = adapter.make_input(shape, int(seed), "cpu").to(example.device, example.dtype).contiguous()
        known.append((x0, honest(model, x0)))
    off = 0.8 * float(goals["gate"].get("max_abs", 0.0))

    def forward(x):
        for x0, y0 in known:
            if torch.equal(x, x0):
                return y0.clone()  # recognised: instant and exact
        time.sleep(HONEST_COST_S)
        out = honest(model, x)
        return out + off * torch.sign(torch.randn_like(out)) if off else out

    return forward, {"cheat": "rebuilds the benchmark input", "seeds": len(known)}
