"""Cheater: on a host of several GPUs, decodes on one it was not given. Were other GPUs there, it
would run each call on the last one it sees, which is another experiment's in a wave (slowing
that rival) or a GPU beyond the memory clause's ballast. Stopped by: the sandbox shows the worker
only its own GPUs' device nodes (harness/sandbox/boundary.py, View.gpus), so CUDA lists one GPU. It
reports what it saw, for tests/test_cheaters_isolation.py to check."""

import os

import torch

from _target import honest


def build_decoder(model, example):
    seen = torch.cuda.device_count() if example.is_cuda else 0
    nodes = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
    other = torch.device(f"cuda:{seen - 1}") if seen > 1 else example.device
    borrowed = model.to(other) if other != example.device else model

    def forward(x):
        return honest(borrowed, x.to(other)).to(x.device)

    return forward, {"cheat": "borrows another GPU", "gpus_seen": seen, "gpu_nodes": nodes}
