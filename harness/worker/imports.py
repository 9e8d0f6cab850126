"""What the worker can import: the frozen code's top-level names from the project root (FROM_ROOT), never the root itself; the candidate's folders and PYTHONPATH's first (import_first)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from harness.target.finder import TargetFinder


# Top-level imports of the frozen code's names only from the project root, after every installed
# module (last on sys.meta_path): the root itself is never on sys.path.
FROM_ROOT = TargetFinder()


def load_adapter(common: Any, goals: Any, names: list[str]) -> Any:
    """The target's adapter, imported through FROM_ROOT (`names`: the frozen code's,
    harness/sandbox/worker_policy.py project_names), the project root never on sys.path."""
    root = common.root().resolve()
    if FROM_ROOT not in sys.meta_path:
        FROM_ROOT.names.update(dict.fromkeys(names, root))
        sys.meta_path.append(FROM_ROOT)
    try:
        importlib.import_module(goals["adapter"])  # through FROM_ROOT, before load_adapter's own finder
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
