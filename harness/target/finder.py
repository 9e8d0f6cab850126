"""A target's own packages importable by name, with no sys.path edit: use(target) maps the packages
its goals.json declares (the adapter's package, and the top folders of the code it names "frozen":
model, integrations; llm) to the target's folder, and nothing else. The person writes goals.json and
the agent may edit none of those packages (agent/policy.py), so the finder is asked first: an
installed module of the same name (a GPU image ships a top-level `model`) never replaces the
target's. Anything else in the folder (optimize.py, a planted torch.py or numpy/) is never
importable through it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
from pathlib import Path

from harness import paths


def packages(folder: Path) -> dict[str, Path]:
    """The packages goals.json declares, where the folder holds them: name -> the package's folder."""
    try:
        goals = json.loads((folder / "goals.json").read_text())
    except (OSError, ValueError):
        return {}
    names = {str(goals.get("adapter") or "").split(".")[0]}
    names |= {Path(str(p)).parts[0].removesuffix(".py") for p in goals.get("frozen") or [] if str(p)}
    return {n: folder / n for n in sorted(names)
            if n.isidentifier() and (folder / n / "__init__.py").is_file()}


class TargetFinder(importlib.abc.MetaPathFinder):
    """Finds the top-level names it maps, each in the folder it maps it to, and only those (their
    submodules: the package's own __path__ as usual). use()'s, first on sys.meta_path, maps a
    target's declared packages; the worker's, last, the frozen code's names at the project root
    (harness/worker/imports.py): the one way a name of the project is imported, never its folder."""

    def __init__(self) -> None:
        self.names: dict[str, Path] = {}  # name -> the folder that holds it

    def find_spec(self, fullname, path=None, target=None):
        where = self.names.get(fullname) if path is None else None
        if where is None:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [str(where)])


_FINDER = TargetFinder()


def use(target: str | Path) -> Path:
    """Make a target's packages importable: a name (targets/NAME/ of this project) or a folder. The
    folder's declared packages are mapped; a later use() of another folder maps its names over these
    (a module already imported stays what it is)."""
    folder = paths.target_folder(target) if isinstance(target, str) else Path(target).resolve()
    _FINDER.names.update({name: package.parent for name, package in packages(folder).items()})
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return folder
