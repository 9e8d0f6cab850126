"""Which Python may run the harness: one outside the project (standard library only, so the agent's
door and the person's program check it before they import torch)."""

from __future__ import annotations

import os
from pathlib import Path


def untrusted_python(prefix: str, executable: str, paths: list[str], projects: list[Path]) -> str | None:
    """Why this interpreter may not run the harness, or None: it, its environment (sys.prefix) or a
    site-packages it imports from lies inside a project folder, where the agent's sandboxed shell
    could write code that the harness, run outside that sandbox, would execute (a .pth file, a
    sitecustomize.py, a replaced bin/python). Paths as given, not resolved: a venv's bin/python is
    a symlink to a system interpreter, and the venv is what counts."""
    packages = [p for p in paths if p and Path(p).name in ("site-packages", "dist-packages")]
    for project in projects:
        for what, path in (("environment", prefix), ("interpreter", executable), *(("site-packages", p) for p in packages)):
            if Path(os.path.abspath(path)).is_relative_to(project):
                return (f"the Python {what} {path} is inside the project {project}, where the agent can write; "
                        "make the virtual environment outside it (README, Quickstart: python3 -m venv ~/.venvs/auto-optim)")
    return None
