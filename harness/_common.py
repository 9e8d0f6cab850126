"""Shared pieces of the frozen evaluator: paths, goals, the target adapter, asset files,
the comparison, hashes, environment facts and the candidate loader.

Everything target-specific comes through goals.json and the adapter module it names; nothing
here knows what model is being optimized.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import os
import platform
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness.target import adapter as adapter_contract

from harness import goals as goals_module
from harness.goals import GOALS_ENV, Goals  # noqa: F401 - GOALS_ENV: the tests' and tools' name for it
from harness.sandbox.interpreter import untrusted_python  # noqa: F401 - named here too, where every tool finds it
from harness.errors import Refused

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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_preset(goals: dict[str, Any], name: str | None, device: str) -> str:
    """`full` on CUDA and `tiny` on CPU unless asked; an unknown name is a setup error."""
    name = name or ("full" if device == "cuda" else "tiny")
    if name not in goals["presets"]:
        raise Refused(f"unknown preset {name!r}; goals.json has {sorted(goals['presets'])}")
    return name


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_tensor(t: torch.Tensor) -> str:
    return sha256_bytes(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())


def frozen_files() -> dict[str, str]:
    """sha256 of every frozen file, by path: what measures and decides (harness/frozen.py: the
    harness's measuring modules, the target's adapter package wherever the goals file puts it, the
    code outside it that goals.json's "frozen" names) and goals.json's measuring keys."""
    from harness import frozen

    goals = load_goals()
    adapter_dir = Path(load_adapter(goals).__file__).resolve().parent
    also = [root() / p for p in goals.frozen]
    missing = [str(p) for p in also if not p.exists()]
    if missing:
        raise Refused(f"{goals_path()} names a frozen path that does not exist: {missing[0]}")
    out = {_display(f): sha256_file(f) for f in frozen.harness_files()}
    for top in (adapter_dir, *also):
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                out[_display(f)] = sha256_file(f)
    out[_display(goals_path())] = sha256_bytes(frozen.goals_bytes(goals_path().read_bytes()))
    return out


def _display(path: Path) -> str:
    """A path as a person would name it: from the target's folder, else from the repository."""
    for base in (root().resolve(), REPO):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)


def frozen_hash(files: dict[str, str] | None = None) -> str:
    """One hash over the frozen files: every row carries the evaluator that produced it."""
    files = frozen_files() if files is None else files
    return sha256_bytes("\n".join(f"{k} {v}" for k, v in sorted(files.items())).encode())[:16]


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


def env_info(device: str, ranks: int = 1) -> dict[str, Any]:
    """GPU name and versions, printed beside every number. A worker group of `ranks` processes
    (one a GPU) is a machine of its own: "2x NVIDIA H100 80GB HBM3", so its rows are compared
    with its own kind only (ledger/rows.py matches rows by preset and gpu)."""
    machine = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    info = {
        "device": device,
        "gpu": f"{ranks}x {machine}" if ranks > 1 else machine,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if device == "cuda" else None,
        "cudnn": torch.backends.cudnn.version() if device == "cuda" else None,
        "python": platform.python_version(),
    }
    return info


def on_cpu(gpu: str) -> bool:
    """Is env_info's "gpu" (a row's) a CPU, one process or a group of them?"""
    return re.sub(r"^\d+x ", "", gpu).startswith("CPU")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


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


def slug(text: str) -> str:
    """A machine's name as a file name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def plural(n: int, word: str) -> str:
    """'1 row', '2 rows'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def run_cli(main: Any, name: str, interrupted: str = "") -> int:
    """A tool's entry point: Ctrl-C ends it with one line and exit 130, not a traceback."""
    try:
        return main()
    except KeyboardInterrupt:
        print(f"{name}: interrupted (Ctrl-C)" + (f"; {interrupted}" if interrupted else ""), file=sys.stderr)
        return 130


def emit(human: list[str], facts: dict[str, Any]) -> None:
    """The output format of every tool: lines for a person, `key: value` lines, one JSON line."""
    for line in human:
        print(line)
    for key, value in facts.items():
        if value not in (None, "") and not isinstance(value, (dict, list)):  # a key with nothing to say is left out
            print(f"{key}: {value}")
    print(json.dumps(facts, default=str))
    sys.stdout.flush()


_refuse_untrusted_python()
