"""Cheater: looks in its environment for the person's secrets (API tokens, keys), to copy them
into its `info`, which the harness records and commits. Stopped by: the worker gets only the
variables its libraries read (harness/measure/session.py WORKER_ENV, and goals.json "worker_env")."""

import os

import torch

from _target import honest

WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CLAUDE")


def build_decoder(model, example):
    found = sorted(k for k in os.environ if any(w in k.upper() for w in WORDS))

    def forward(x):
        out = honest(model, x)
        return torch.empty_like(out) if found else out  # what it found would go into info

    return forward, {"cheat": "reads the environment", "found": found}
