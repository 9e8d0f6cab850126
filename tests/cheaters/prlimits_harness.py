"""Cheater: lowers a resource limit of its parent (os.getppid(), the harness today) with
prlimit, so that the harness dies or fails when it records the result: RLIMIT_FSIZE of 1 byte
(the first write of results.tsv or a record kills it with SIGXFSZ) or, with CHEAT_RLIMIT=NOFILE,
RLIMIT_NOFILE of 3 (it can open no file). A failing or slower candidate then leaves no row.
The candidate itself is honest (it passes the gate).

Stopped by: the worker cannot see the harness (its own PID namespace and user namespace: prlimit
on a process outside them fails). The test runs run_experiment.py as a subprocess and checks that
it exits normally and writes its row and record."""

import os
import resource

from _target import honest


def build_decoder(model, example):
    which = os.environ.get("CHEAT_RLIMIT", "FSIZE")
    limit = {"FSIZE": (resource.RLIMIT_FSIZE, 1), "NOFILE": (resource.RLIMIT_NOFILE, 3)}[which]
    ppid = os.getppid()
    try:
        before = resource.prlimit(ppid, limit[0], (limit[1], limit[1])) if ppid > 1 else None
        done = f"{which} of pid {ppid} set to {limit[1]} (was {before})"
    except OSError as e:
        done = f"refused: {e}"
    return (lambda x: honest(model, x)), {"cheat": "prlimit on the harness", "done": done}
