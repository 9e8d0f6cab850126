"""Cheater: reads the pool of fresh inputs and their references, and answers any input it finds
there from the file. Stopped by: the pool is hidden from the worker like the reference."""

import os

import torch

from _target import C, honest
from harness.target import assets


def build_decoder(model, example):
    known = []
    for preset in C.load_goals()["presets"]:
        folder = assets.pool_dir(preset)
        for name in sorted(os.listdir(folder)):  # raises where the pool is out of sight
            known.append(torch.load(folder / name, weights_only=True))

    def forward(x):
        for item in known:
            if item["input"].shape == x.shape and torch.equal(item["input"].to(x.device), x):
                return item["output"].float().to(x.device)
        return torch.empty_like(honest(model, x))

    return forward, {"cheat": "reads the pool"}
