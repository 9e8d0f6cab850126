"""A target's top-level packages importable by name, with no sys.path edit: use(target) maps the
names of the folders that hold an __init__.py directly in the target's folder (model, integrations;
llm) to that folder, and nothing else. Its other files (optimize.py, a planted torch.py) are never
importable through it, and it is asked last (after the interpreter's own finders), so an installed
module or the standard library is never replaced by a folder the agent can write.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from pathlib import Path

from harness import paths


def packages(folder: Path) -> dict[str, Path]:
    """The target's top-level packages: name -> the folder's path."""
    return {p.name: p for p in sorted(folder.iterdir())
            if p.is_dir() and p.name.isidentifier() and (p / "__init__.py").is_file()}


class TargetFinder(importlib.abc.MetaPathFinder):
    """Finds the top-level names use() mapped, and only those (their submodules: the package's own
    __path__ as usual)."""

    def __init__(self) -> None:
        self.names: dict[str, Path] = {}

    def find_spec(self, fullname, path=None, target=None):
        where = self.names.get(fullname) if path is None else None
        if where is None:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [str(where.parent)])


_FINDER = TargetFinder()


def use(target: str | Path) -> Path:
    """Make a target's packages importable: a name (targets/NAME/ of this project) or a folder. The
    folder's packages as they are now are mapped; a later use() of another folder maps its names
    over these (a module already imported stays what it is)."""
    folder = paths.target_folder(target) if isinstance(target, str) else Path(target).resolve()
    _FINDER.names.update(packages(folder))
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
    return folder
