"""Cheater: computes the example input it was built with, whatever it is called with. Stopped by:
every call gets a different input, and the example is none of them."""

from _target import honest


def build_decoder(model, example):
    fixed = example.clone()
    return (lambda x: honest(model, fixed)), {"cheat": "ignores its input"}
