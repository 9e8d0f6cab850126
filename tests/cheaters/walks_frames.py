"""Cheater: walks the interpreter's frames and the garbage collector for the harness's reference
tensors (an output-shaped tensor it did not make) and returns one. Agents have done this to
in-process benchmarks. Stopped by: the references live in another process; in the worker the only
output-shaped tensor besides its own is the shared output buffer, poisoned before every call."""

import gc
import sys

import torch

from _target import honest


def _found(shape, mine):
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, torch.Tensor) and value.shape == shape and value is not mine:
                return value
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.shape == shape and obj is not mine:
            return obj
    return None


def build_decoder(model, example):
    shape = honest(model, example).shape

    def forward(x):
        mine = torch.empty(shape, device=x.device)
        found = _found(shape, mine)
        return found.clone() if found is not None else mine

    return forward, {"cheat": "walks frames and gc for the reference"}
