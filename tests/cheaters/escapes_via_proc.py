"""Cheater: reaches into the harness's process through /proc: its open files, its memory, its root
and working directory, looking for the reference. Stopped by: the harness's /proc entries are
hidden from the worker, and Landlock forbids ptrace-level access to processes outside the sandbox."""

import glob
import os

import torch

from _target import honest


def _try_read(path):
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16)
    except OSError:
        return None


def build_decoder(model, example):
    ppid = os.getppid()
    found = []
    for path in [f"/proc/{ppid}/mem", f"/proc/{ppid}/environ", f"/proc/{ppid}/maps",
                 *glob.glob(f"/proc/{ppid}/fd/*"), *glob.glob(f"/proc/{ppid}/cwd/assets/reference_*"),
                 *glob.glob(f"/proc/{ppid}/root/tmp/*")]:
        data = _try_read(path)
        if data:
            found.append(path)

    def forward(x):
        out = honest(model, x)
        return out if not found else torch.empty_like(out)  # anything found would be used here

    return forward, {"cheat": "reads the harness through /proc", "found": found[:5]}
