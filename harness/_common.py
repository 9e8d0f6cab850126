"""The target as the tools see it: its goals, its folder, its adapter, a preset, the candidate's
build function; and the write that never leaves half a file. No torch here (the machine's facts:
harness/machine.py; hashes: harness/hashing.py; the frozen hash: harness/frozen.py; what tools
print: harness/console.py).

Everything target-specific comes through goals.json and the adapter module it names; nothing
here knows what model is being optimized.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.target import adapter as adapter_contract

from harness import goals as goals_module
from harness.goals import GOALS_ENV, Goals  # noqa: F401 - GOALS_ENV: the tests' and tools' name for it
from harness.sandbox.interpreter import untrusted_python  # noqa: F401 - named here too, where every tool finds it
from harness.errors import Refused
from harness.console import plural
from harness.hashing import sha256_bytes

REPO = Path(__file__).resolve().parent.parent
_HERE = Path(__file__).resolve().parent

MIN_RUNS = 5  # timed calls at least: fewer give no meaningful median or spread


def seconds(text: str) -> float:
    """argparse's type for a time limit: a finite number of seconds above 0 (nan or inf would
    reach a socket's timeout and stop the harness with a traceback)."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


def goals_path() -> Path:
    try:
        return goals_module.path()
    except goals_module.GoalsError as e:
        raise Refused(str(e)) from None


def load_goals() -> Goals:
    """goals.json as a Goals (harness/goals.py): read once per process, again only if it changes."""
    try:
        return goals_module.load()
    except goals_module.GoalsError as e:
        raise Refused(str(e)) from None


def root() -> Path:
    """The directory the goals file lives in: candidate, assets and records are relative to it."""
    return goals_path().parent


def load_adapter(goals: dict[str, Any]) -> ModuleType:
    """The target's adapter module, checked against harness/target/adapter.py's Adapter: Refused
    naming every missing piece at once."""
    from harness import target  # the target's packages by name, nothing else of its folder

    target.use(root())
    name = goals.get("adapter")
    if not isinstance(name, str) or not name:
        raise Refused(f"{goals_path()} names no adapter module (\"adapter\": \"package.module\")")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):  # the adapter itself, not something it imports
            raise Refused(f"adapter module {name} (goals.json \"adapter\") not found next to {goals_path()}") from None
        raise
    missing = adapter_contract.missing(module, needs_min_bytes=goals.get("floor", {}).get("work") == "bytes")
    if missing:
        raise Refused(f"adapter {name} ({module.__file__}) lacks {plural(len(missing), 'function')} the harness "
                         f"calls: " + "; ".join(missing))
    return module


def _refuse_untrusted_python() -> None:
    """Every harness tool starts here (it imports this module): one line and exit 2 from an
    interpreter inside the project. Code planted there has run already by now (site runs first),
    which is why the Claude Code hooks start an absolute interpreter with -I and the guard refuses
    such an interpreter before it starts; this tells a person to move the environment."""
    main = Path(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    if main is None or not main.is_relative_to(_HERE):
        return  # imported by a test or a notebook, not a harness tool
    try:
        projects = sorted({REPO, root().resolve()})
    except Refused:
        projects = [REPO]  # no target yet: the tool says so itself
    why = untrusted_python(sys.prefix, sys.executable, sys.path, projects)
    if why:
        print(f"harness: refused: {why}", file=sys.stderr)
        sys.exit(2)


def pick_preset(goals: dict[str, Any], name: str | None, device: str) -> str:
    """`full` on CUDA and `tiny` on CPU unless asked; an unknown name is a setup error."""
    name = name or ("full" if device == "cuda" else "tiny")
    if name not in goals["presets"]:
        raise Refused(f"unknown preset {name!r}; goals.json has {sorted(goals['presets'])}")
    return name


def atomic_write(path: Path, data: bytes | str, exclusive: bool = False) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file. exclusive: a
    file that exists is never replaced (Refused): records are written once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    if not exclusive:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)  # fails where the name exists, with no window between the check and the write
    except FileExistsError:
        raise Refused(f"{path} exists; a record is never written over") from None
    finally:
        tmp.unlink()


def load_candidate(path: Path, goals: dict[str, Any]):
    """Import the candidate file under a fresh module name: (its build function, the sha256 of
    the exact source that was executed). run_experiment compares that hash with the source it
    records, so a file edited while it is being measured cannot be recorded under the wrong code."""
    if not path.is_file():
        raise Refused(f"candidate file not found: {path}")
    from harness.target.loader import build_function, load_source

    source = path.read_bytes()
    module = load_source(path, source, f"_candidate_{sha256_bytes(str(path).encode())[:8]}_{os.getpid()}")
    return build_function(module, goals["build_fn"], path), sha256_bytes(source)


_refuse_untrusted_python()
