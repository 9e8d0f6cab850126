"""What the worker can import: the frozen code's top-level names from the project root (ProjectFinder), never the root itself; the candidate's folders and PYTHONPATH's first (import_first)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from typing import Any


class ProjectFinder(importlib.abc.MetaPathFinder):
    """Top-level imports of the frozen code's names only (`names`) from the project root, after
    every installed module (it is last on sys.meta_path): the root itself is never on sys.path."""

    def __init__(self, root: Path, names: set[str]) -> None:
        self.root, self.names = str(root), names

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        if path is not None or name not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [self.root])


def load_adapter(common: Any, goals: Any, names: list[str]) -> Any:
    """The target's adapter, imported through ProjectFinder (`names`: the frozen code's,
    harness/measure/worker_process.py frozen_names), the project root never on sys.path."""
    root = common.root().resolve()
    if not any(isinstance(f, ProjectFinder) for f in sys.meta_path):
        sys.meta_path.append(ProjectFinder(root, set(names)))
    try:
        importlib.import_module(goals["adapter"])  # through ProjectFinder, before load_adapter's own finder
    except ModuleNotFoundError:
        pass  # load_adapter says which, in one line
    return common.load_adapter(goals)


def import_path_after_walls() -> None:
    """The environment's PYTHONPATH folders that -I left out, first on sys.path as without it:
    the absolute ones outside the project (a relative one is the working folder, the project root)."""
    root = Path(__file__).resolve().parents[2]  # the project's
    import_first([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                  if os.path.isabs(p) and root not in (Path(p).resolve(), *Path(p).resolve().parents)])


def import_first(folders: list[str]) -> None:
    """Folders first on sys.path, as an interpreter without -I has them: the environment's
    PYTHONPATH (after the walls) and the candidate's own folder and home (as a script's folder).
    The harness's one sys.path edit (tests/test_layout.py names it): the worker's, sandboxed."""
    sys.path[:0] = [p for p in folders if p not in sys.path]
