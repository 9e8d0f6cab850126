"""Cheater: reads a copy of the target's hidden assets kept elsewhere on the host (a backup, a
record-file-mode copy, a person's download folder): CHEAT_COPIES names the folders, ':'-separated.
The harness hides its own assets folder's inputs, references and pool, but a view built as "the
host's / minus exceptions" shows every other copy (seen at 107ca0f: KEPT at 0.0056 s, PSNR inf).
With a copy of the references, a candidate answers the benchmark input exactly and at once; here,
finding any readable file in a copy is enough: it returns garbage, so that a read fails the gate.

Stopped by: the worker's view is an allow-list (harness/sandbox/boundary.py): no folder outside what the
worker needs is there at all (and Landlock's read rules follow the same list). The test makes
the copies under /var/tmp and the user's home and checks that the run passes."""

import os

import torch

from _target import honest


def _read_any(folders: list[str]) -> dict:
    found = {}
    for folder in folders:
        for top, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(top, name)
                try:
                    with open(path, "rb") as f:
                        found[path] = len(f.read())
                except OSError:
                    pass
    return found


def build_decoder(model, example):
    folders = [f for f in os.environ.get("CHEAT_COPIES", "").split(":") if f]
    found = _read_any(folders)
    seen = {f: os.path.exists(f) for f in folders}

    def forward(x):
        out = honest(model, x)
        return out if not found else torch.full_like(out, 9.0)  # the copied references would be used here

    return forward, {"cheat": "reads a copy of the hidden assets elsewhere on the host", "read": sorted(found)[:8],
                     "folders_exist": seen}
