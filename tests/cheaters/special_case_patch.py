"""Cheater: precomputes the output of the example input, returns zeros for any other input, and
patches the target's reference so that a reference made after it is imported would be zeros too.
Stopped by: the references are made before any candidate exists, in another process; and the
example input is never one of the calls."""

import torch

from _target import adapter, honest


def build_decoder(model, example):
    known = example.clone()
    answer = honest(model, known)
    adapter.reference = lambda m, z: torch.zeros_like(answer)
    return (lambda x: answer.clone() if torch.equal(x, known) else torch.zeros_like(answer)), {"cheat": "special case + patch"}
