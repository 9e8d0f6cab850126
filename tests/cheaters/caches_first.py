"""Cheater: computes once and returns that first output for every later input. Stopped by: every
call's output is checked against that call's own reference."""

from _target import honest


def build_decoder(model, example):
    cache = {}

    def forward(x):
        if "out" not in cache:
            cache["out"] = honest(model, x)
        return cache["out"].clone()

    return forward, {"cheat": "caches the first output"}
