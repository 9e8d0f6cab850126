"""What the frozen hash covers: the code that measures and decides, and goals.json's measuring keys;
nothing else (issue 42, item 3). A row carries the hash, so two rows compare only when what measured
and judged them is the same; an edit to a plot, the leaderboard, a person's command, the scaffold or
the agent's hooks (agent/, outside harness/) changes no verdict and starts no new comparison.

Hashed: every module of harness/ (its subpackages too: target/, sandbox/, measure/, worker/, baselines/)
but NOT_MEASURING, the target's adapter package and the code goals.json names "frozen"
(frozen_files below). A new module is hashed unless it is named here or lies in a
package named here: forgetting one costs a rebaseline, never a row measured by unhashed code.

Of goals.json, every key but the descriptive ones (DESCRIPTIVE, and keys ending in "_rationale"),
at any depth: the text that explains a bound is not the bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import _common
from harness.errors import Refused
from harness.hashing import sha256_bytes, sha256_file

HARNESS = Path(__file__).resolve().parent

# What of the harness neither measures nor decides, by path under harness/ (a folder: all of it): the
# command-line tools (cli/: they parse options and call the measuring code; the scaffold; progress
# lines), the ledger's views (the leaderboard, the plots) and its bookkeeping (the rows, the records
# and their signatures, applying a record, its git: what it stores, not how it was judged), and
# start.py (how a tool's child finds the package).
NOT_MEASURING = frozenset({
    "cli/",
    "start.py",
    "ledger/",
})
# Keys of goals.json that only explain (at any depth).
DESCRIPTIVE = frozenset({"description", "note", "text", "rationale"})


def every_harness_file() -> list[Path]:
    """Every file of the harness: what the tamper check compares before and after a run
    (harness/cli/run_experiment.py code_files), hashed or not."""
    return [f for f in sorted(HARNESS.rglob("*")) if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"]


def harness_files() -> list[Path]:
    """The harness's files the hash covers."""
    return [f for f in every_harness_file() if not measures_nothing(f.relative_to(HARNESS).as_posix())]


def measures_nothing(path: str) -> bool:
    """A path under harness/ that NOT_MEASURING names, itself or a folder above it."""
    return path in NOT_MEASURING or any(path.startswith(p) for p in NOT_MEASURING if p.endswith("/"))


def measuring(data: Any) -> Any:
    """goals.json's data without its descriptive keys, at any depth."""
    if isinstance(data, dict):
        return {k: measuring(v) for k, v in data.items() if k not in DESCRIPTIVE and not k.endswith("_rationale")}
    if isinstance(data, list):
        return [measuring(v) for v in data]
    return data


def goals_bytes(raw: bytes) -> bytes:
    """What of a goals file is hashed: its measuring keys as canonical JSON (a file that is not JSON:
    its bytes, so a broken file still changes the hash)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw
    return json.dumps(measuring(data), sort_keys=True, separators=(",", ":")).encode()


def frozen_files() -> dict[str, str]:
    """sha256 of every frozen file, by path: what measures and decides (harness/frozen.py: the
    harness's measuring modules, the target's adapter package wherever the goals file puts it, the
    code outside it that goals.json's "frozen" names) and goals.json's measuring keys."""
    goals = _common.load_goals()
    adapter_dir = Path(_common.load_adapter(goals).__file__).resolve().parent
    also = [_common.root() / p for p in goals.frozen]
    missing = [str(p) for p in also if not p.exists()]
    if missing:
        raise Refused(f"{_common.goals_path()} names a frozen path that does not exist: {missing[0]}")
    out = {_display(f): sha256_file(f) for f in harness_files()}
    for top in (adapter_dir, *also):
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                out[_display(f)] = sha256_file(f)
    out[_display(_common.goals_path())] = sha256_bytes(goals_bytes(_common.goals_path().read_bytes()))
    return out


def _display(path: Path) -> str:
    """A path as a person would name it: from the target's folder, else from the repository."""
    for base in (_common.root().resolve(), _common.REPO):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)


def frozen_hash(files: dict[str, str] | None = None) -> str:
    """One hash over the frozen files: every row carries the evaluator that produced it."""
    files = frozen_files() if files is None else files
    return sha256_bytes("\n".join(f"{k} {v}" for k, v in sorted(files.items())).encode())[:16]
