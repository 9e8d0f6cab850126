"""Cheater: returns bf16 where the reference is fp32 (half the bytes to write). Stopped by: the
dtype check."""

import torch

from _target import honest


def build_decoder(model, example):
    return (lambda x: honest(model, x).to(torch.bfloat16)), {"cheat": "wrong dtype"}
