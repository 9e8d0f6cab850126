"""What the frozen hash covers: the code that measures and decides, and goals.json's measuring keys;
nothing else (issue 42, item 3). A row carries the hash, so two rows compare only when what measured
and judged them is the same; an edit to a plot, the leaderboard, a person's command, the scaffold or
the agent's hooks (agent/, outside harness/) changes no verdict and starts no new comparison.

Hashed: every module of harness/ (its subpackages too: baselines/, target/) but NOT_MEASURING, the
target's adapter package and the code goals.json names "frozen" (harness/_common.py frozen_files).
A new module is hashed unless it is named here: forgetting one costs a rebaseline, never a row
measured by unhashed code.

Of goals.json, every key but the descriptive ones (DESCRIPTIVE, and keys ending in "_rationale"),
at any depth: the text that explains a bound is not the bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).resolve().parent

# The harness's modules that neither measure nor decide: the views of the ledger (the leaderboard,
# the plots), the ledger's bookkeeping (the rows, the records and their signatures, applying a
# record: what it stores, not how it was judged), the person's and the agent's commands (they parse
# options and call the measuring code), and the scaffold.
NOT_MEASURING = frozenset({
    *(f"ledger/{name}.py" for name in ("__init__", "errors", "rows", "record", "store", "results", "record_file", "apply",
                                        "summary", "leaderboard", "plots", "signing", "git_plumbing", "cli")),
    "person.py", "door.py", "request.py", "run_experiment.py", "wave.py", "verify.py", "bench.py", "prepare.py",
    "new_target.py", "phases.py",
})
# Keys of goals.json that only explain (at any depth).
DESCRIPTIVE = frozenset({"description", "note", "text", "rationale"})


def harness_files() -> list[Path]:
    """The harness's files the hash covers."""
    return [f for f in sorted(HARNESS.rglob("*")) if f.is_file() and "__pycache__" not in f.parts
            and f.suffix != ".pyc" and f.relative_to(HARNESS).as_posix() not in NOT_MEASURING]


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
