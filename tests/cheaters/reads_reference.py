"""Cheater: returns the reference read from disk (assets/reference_*.pt). Stopped by: the sandbox
denies the worker every input, reference and pool file."""

import torch

from _target import C


def build_decoder(model, example):
    refs = sorted(C.assets_dir().glob("reference_*.pt"))
    saved = torch.load(refs[0], weights_only=True)["output"]
    return (lambda x: saved.clone().to(x.device)), {"cheat": "reads the reference file"}
