"""The candidate as measured: its bytes, read once, without following a link inside the project.

The harness reads the agent's file once (harness/nofollow.py when it lies in the project: a
link anywhere on its path is refused, NotPlain) and sends those bytes to the worker, which imports
them (harness/worker/main.py), never the file: what the worker runs and what the record holds are the
same bytes, whatever the agent does to the file meanwhile. A file a person names outside the
project is read as named.
"""

from __future__ import annotations

from pathlib import Path

from harness import nofollow


def read(path: Path, root: Path) -> bytes:
    """The candidate's bytes: without following a link when it lies under `root` (NotPlain),
    FileNotFoundError when it is not there."""
    rel = nofollow.relative(root, path)
    return nofollow.read_bytes(root, rel) if rel else Path(path).read_bytes()
