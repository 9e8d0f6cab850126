"""Cheater: rewrites a file of the harness on disk while it is being measured (the old harness
recorded a 7x faster time this way; the frozen-file hash only noticed at the next experiment).
Stopped by: the sandbox shows the worker the harness read-only; unsandboxed, the tamper check
voids the run."""

from pathlib import Path

from _target import C, honest


def build_decoder(model, example):
    target = Path(C.__file__).resolve().parent / "cli" / "bench.py"  # the harness that is running
    with open(target, "a") as f:
        f.write("\n# rewritten by a candidate\n")
    return (lambda x: honest(model, x)), {"cheat": "rewrites the harness"}
