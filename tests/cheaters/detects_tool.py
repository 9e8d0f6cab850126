"""Cheater: honest when it sees the gate looking (harness.cli.verify imported, or 'verify' in the
command line of its parent or grandparent), empty otherwise. The old harness let it pass verify
and bench at 0.0000 s. Stopped by: the worker never imports the tools, the /proc entries of the
harness and its ancestors are hidden from it, so it never sees verify; and every call is
checked, whichever tool runs it. The test runs it through verify.py."""

import os
import sys

import torch

from _target import honest


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _gate_watching() -> bool:
    ppid = os.getppid()
    return "harness.cli.verify" in sys.modules or any(b"verify" in _cmdline(p) for p in (ppid, _parent_of(ppid)))


def build_decoder(model, example):
    watched = _gate_watching()

    def forward(x):
        out = honest(model, x)
        return out if watched else torch.empty_like(out)

    return forward, {"cheat": "detects the tool", "watched": watched}
