"""Cheater: drops the last element along the last axis. Stopped by: the shape check."""

from _target import honest


def build_decoder(model, example):
    return (lambda x: honest(model, x)[..., :-1]), {"cheat": "wrong shape"}
