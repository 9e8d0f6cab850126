"""Cheater: returns zeros of the right shape. Stopped by: the gate on every output."""

import torch

from _target import honest


def build_decoder(model, example):
    shape = honest(model, example).shape
    return (lambda x: torch.zeros(shape, device=x.device)), {"cheat": "zeros"}
