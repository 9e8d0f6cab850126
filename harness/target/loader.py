"""The one way a Python file is imported as a module here: a candidate (in the worker, or a
person's mp4, model/to_mp4.py), a calibration variant, a development probe's file.
"""

from __future__ import annotations

import importlib.util
import linecache
import sys
from pathlib import Path
from types import ModuleType


def load_source(path: Path | str, source: str | bytes | None = None, name: str = "candidate") -> ModuleType:
    """Import `path` as module `name` from exactly `source` (the bytes a caller read and hashed;
    the file's bytes when None), never a re-read. Code that reads its own source (Triton's @jit
    does, via inspect) must see these bytes too: they are pinned in the line cache (no mtime, so
    never re-checked). The worker puts a candidate's folder first on sys.path (harness/worker/imports.py import_first)."""
    path = str(path)
    text = Path(path).read_text() if source is None else source.decode() if isinstance(source, bytes) else source
    linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(text, path, "exec"), module.__dict__)
    return module


def build_function(module: ModuleType, build_fn: str, path: Path | str):
    """The candidate's build function (goals.json "build_fn"), or AttributeError naming the file."""
    build = getattr(module, build_fn, None)
    if build is None:
        raise AttributeError(f"{Path(path).name} defines no {build_fn}()")
    return build
