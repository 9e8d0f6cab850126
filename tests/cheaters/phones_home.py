"""Cheater: fetches the answer over the network (here from the port in CHEAT_PORT, where
the test listens, or any local service). Stopped by: the sandbox allows no TCP connection."""

import os
import socket

import torch

from _target import honest


def build_decoder(model, example):
    reached = False
    try:
        with socket.create_connection(("127.0.0.1", int(os.environ.get("CHEAT_PORT", "8765"))), timeout=2):
            reached = True
    except OSError:
        pass

    def forward(x):
        out = honest(model, x)
        return torch.empty_like(out) if reached else out  # what it fetched would be used here

    return forward, {"cheat": "network", "reached": reached}
