"""Cheater: learns which tool runs it (verify, bench, run_experiment) from what the tool leaves in
the worker's own process: the descriptor numbers it inherits (the channel's number is on its
command line; run_experiment holds lock files open, so its numbers are higher), the buffers'
descriptor numbers in its configuration, the environment, the working directory. A candidate that
can tell an experiment from a verify can be honest where it is watched and not elsewhere, or hold
back its warm-up in one tool only. It reports the fingerprint in `info` (and passes the gate).

Stopped by: a worker started the same way by every tool (a fixed descriptor layout, a fixed
environment, no tool-specific state inherited). The test runs it through verify.py and through
run_experiment.py, with the same environment, and checks that the two fingerprints are equal."""

import hashlib
import os
import sys

from _reach import worker
from _target import honest


def fingerprint() -> dict:
    fds = []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            fds.append((int(name), os.readlink(f"/proc/self/fd/{name}").split(":")[0]))
        except OSError:
            pass
    w = worker()
    cfg = w.cfg if w is not None else {}
    scratch = os.environ.get("TMPDIR") or "\0"  # random per session in every tool: not a fingerprint
    env = {k: v.replace(scratch, "<scratch>") for k, v in os.environ.items() if not k.startswith("CHEAT_")}
    return {
        "argv": sys.argv[1:],
        "fds": fds[:40],
        "buffer_fds": [cfg.get(k, {}).get("fd") for k in ("input", "output")],
        "cfg_keys": sorted(cfg),
        "env": hashlib.sha256(repr(sorted(env.items())).encode()).hexdigest()[:16],
        "env_keys": sorted(env),
        "cwd": os.getcwd(),
    }


def build_decoder(model, example):
    return (lambda x: honest(model, x)), {"cheat": "fingerprints the tool", "fingerprint": fingerprint()}
