"""The code a candidate is timed beside: the baseline's file, or the current keeper's source (its record's, else its commit's) as a file."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from harness import hashing, _common
from harness.ledger import git_plumbing
from harness.ledger.apply import git_repo
from harness.ledger.store import Store
from harness.errors import Refused

BASELINE = Path(__file__).resolve().parents[1] / "baselines" / "fp32_eager.py"


def keeper_file(current: dict[str, str] | None, goals: dict[str, Any]) -> tuple[Path | None, Path | None]:
    """The current keeper's source as a file to measure beside the candidate (a private temporary
    folder, removed after), and that folder: the baseline's file, or the source its record holds,
    else the candidate file as its row's commit holds it; (None, None) when neither is its code."""
    if current is None:
        return None, None
    if current["status"] == "baseline":
        return (BASELINE, None) if hashing.sha256_bytes(BASELINE.read_bytes())[:16] == current["candidate_sha"] else (None, None)
    source = _recorded_source(current["exp"])
    if source is None or hashing.sha256_bytes(source.encode())[:16] != current["candidate_sha"]:
        source = _committed_source(current.get("commit", "-"), goals)
    if source is None or hashing.sha256_bytes(source.encode())[:16] != current["candidate_sha"]:
        return None, None
    folder = Path(tempfile.mkdtemp(prefix="auto-optim-keeper-"))
    path = folder / Path(goals["candidate"]).name
    path.write_text(source)
    return path, folder


def _recorded_source(exp: str) -> str | None:
    try:
        return Store.here().source(exp)
    except Refused:
        return None


def _committed_source(commit: str, goals: dict[str, Any]) -> str | None:
    """The candidate file as a keeper's commit holds it (a keep commits its source as the candidate)."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit or ""):
        return None
    repo = git_repo()
    if repo is None:
        return None
    blob = git_plumbing.show(repo, commit, os.path.relpath(_common.root() / goals["candidate"], repo))
    return blob.decode(errors="replace") if blob is not None else None
