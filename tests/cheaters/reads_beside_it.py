"""Cheater: reads what lies beside its own file on the host. A candidate with helper modules has its
folder importable in the worker; when that folder is /tmp or a home folder, everything else in it
comes along: a GPU session's copy of the signing key in /tmp, ~/.config, other experiments' files. It
reads CHEAT_BESIDE (files next to it, separated by os.pathsep: one that is no Python code, a .py link to
a file elsewhere) and imports its helper (_target.py), then writes to the worker's /tmp: a folder shown
over /tmp would make that read-only. Whatever it reads beside it, it returns garbage, so a read shows as a gate failure.

Stopped by: the worker is shown the candidate's helpers (the modules and packages beside it), never
its folder (harness/sandbox/worker_policy.py candidate_helpers). The test checks that it passes."""

import os
import tempfile

import torch

from _target import honest


def build_decoder(model, example):
    read = None
    for beside in filter(None, os.environ.get("CHEAT_BESIDE", "").split(os.pathsep)):
        try:
            with open(beside, "rb") as f:
                read = f.read(100)
            break
        except OSError:
            pass
    with tempfile.NamedTemporaryFile(dir="/tmp") as scratch:  # its own /tmp stays writable
        scratch.write(b"x")
    if read is not None:
        return (lambda x: torch.zeros_like(honest(model, x))), {"cheat": "read beside it", "read": read.decode(errors="replace")}
    return (lambda x: honest(model, x)), {"cheat": "read beside it", "read": None}
