"""Cheater: keeps its input-fingerprint cache on disk, so that a later experiment (a new worker)
finds the outputs of inputs it has seen before. Stopped by: the sandbox lets the worker write only
its scratch folder, which is deleted with the session; every other place fails."""

import hashlib
import os
from pathlib import Path

import torch

from _target import honest

PLACES = [Path(__file__).resolve().parent, Path.home(), Path("/tmp"), Path("/dev/shm"), Path("/var/tmp")]


def build_decoder(model, example):
    def forward(x):
        name = "cheat-" + hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()[:16] + ".pt"
        for place in PLACES:
            if (place / name).is_file():
                return torch.load(place / name)
        out = honest(model, x)
        for place in PLACES:
            try:
                torch.save(out, place / name)
            except Exception:  # noqa: BLE001 - torch.save raises RuntimeError on a refused open
                pass
        return out

    return forward, {"cheat": "cache on disk, across runs", "tmpdir": os.environ.get("TMPDIR")}
