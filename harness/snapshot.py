"""The candidate as measured: a private copy of its bytes, read once, without following a link.

Every tool measures a copy, never the agent's file: the file is read once (harness/hooks/nofollow.py
when it lies in the project: a link anywhere on its path is refused) into a folder of this process's
own (mkdtemp: mode 0700, under /tmp, which the agent's sandbox mounts read-only), so what the worker
runs and what the record holds are the same bytes, whatever the agent does to the file meanwhile.
A file a person names outside the project is read as named.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from harness.hooks import nofollow


def read(path: Path, root: Path) -> bytes:
    """The candidate's bytes: without following a link when it lies under `root` (NotPlain),
    FileNotFoundError when it is not there."""
    rel = nofollow.relative(root, path)
    return nofollow.read_bytes(root, rel) if rel else Path(path).read_bytes()


@contextlib.contextmanager
def copy(name: str, data: bytes) -> Iterator[Path]:
    """A private file `name` holding `data` (read()'s), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="auto-optim-candidate-"))
    try:
        out = folder / Path(name).name
        out.write_bytes(data)
        yield out
    finally:
        shutil.rmtree(folder, ignore_errors=True)
