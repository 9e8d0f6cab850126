"""Cheater: has a child process (cp) copy the reference somewhere readable, then loads the copy.
A Python audit hook would not see it; the old harness passed it with PSNR inf. Stopped by: the
sandbox binds every process the worker starts."""

import os
import subprocess

import torch

from _target import C
from harness.target import assets


def build_decoder(model, example):
    dest = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ref.pt")
    ref = assets.reference_path("tiny")
    subprocess.run(["cp", str(ref), dest], check=True)
    saved = torch.load(dest, weights_only=True)["output"]
    return (lambda x: saved.clone().to(x.device)), {"cheat": "cp the reference"}
