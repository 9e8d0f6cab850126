"""What the frozen hash covers: the code that measures and decides, and goals.json's measuring keys;
nothing else (issue 42, item 3). A row carries the hash, so two rows compare only when what measured
and judged them is the same; an edit to a plot, the leaderboard, a person's command, the scaffold or
the agent's hooks (agent/, outside harness/) changes no verdict and starts no new comparison.

Hashed: every module of harness/ (its subpackages too: target/, sandbox/, measure/, worker/, baselines/)
but NOT_MEASURING, the target's adapter package and the code goals.json names "frozen"
(harness/_common.py frozen_files). A new module is hashed unless it is named here or lies in a
package named here: forgetting one costs a rebaseline, never a row measured by unhashed code.

Of goals.json, every key but the descriptive ones (DESCRIPTIVE, and keys ending in "_rationale"),
at any depth: the text that explains a bound is not the bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
