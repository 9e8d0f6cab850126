"""Cheater: connects to a Unix socket bound at a path on the host (here the one the test listens
at, named in its source; in the wild a session bus, a container runtime, an SSH agent), whose
service could run commands outside every namespace. A read-only mount does not stop a connect, and
Landlock does not govern it. Stopped by: the worker's view covers every socket the host has bound
at a path with /dev/null, and /run is empty (harness/sandbox/boundary.py)."""

import os
import socket

import torch

from _target import honest


def build_decoder(model, example):
    path = os.environ.get("CHEAT_SOCKET", "/run/user/0/bus")
    reached = False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)
            s.sendall(b"hello from the sandbox")
            reached = True
    except OSError:
        pass

    def forward(x):
        out = honest(model, x)
        return torch.empty_like(out) if reached else out  # what it asked for would be done outside

    return forward, {"cheat": "dials a host unix socket", "reached": reached}
