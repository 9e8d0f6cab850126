"""Cheater (or a bug): never returns. Stopped by: the per-call timeout; the worker is killed."""

import time


def build_decoder(model, example):
    def forward(x):
        while True:
            time.sleep(1)

    return forward, {"cheat": "hangs"}
