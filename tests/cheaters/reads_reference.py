"""Cheater: returns the reference read from disk (assets/reference_<preset>.pt). Stopped by: the
sandbox's view of the project holds no input, reference or pool file (and Landlock denies them
inside it)."""

import torch

from _target import C
from harness.target import assets


def build_decoder(model, example):
    preset = next(p for p in C.load_goals()["presets"] if list(example.shape) == C.load_goals()["presets"][p]["input_shape"])
    saved = torch.load(assets.reference_path(preset), weights_only=True)["output"]
    return (lambda x: saved.clone().to(x.device)), {"cheat": "reads the reference file"}
