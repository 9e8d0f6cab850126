"""Record files: what `auto-optim measure --record-out` writes on a measuring machine and `auto-optim apply` reads in the git checkout, signed with the person's key (signing.py), each record checked field by field (record.check_measured)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness import _common
from harness.ledger import signing
from harness.errors import Refused
from harness.ledger.record import check_measured
from harness.paths import agent_policy

# runs/ is the harness's scratch (a wave's members write there), but its requests are the door's.
SCRATCH = "runs"


def check_record_out(path: Path) -> None:
    """A record file is a new .json (never written over a file) outside every path the agent may not
    write (agent/policy.py: the harness's code, goals, records, adapter, .claude/, .git/,
    .gitignore, ...), in this checkout and the target's folder; runs/ (not runs/requests/) is the
    harness's scratch, where a wave's members write theirs."""
    named, real = Path(os.path.abspath(path)), path.resolve()
    why = "it is not a .json file" if named.suffix != ".json" else \
        "it exists: a record is never written over a file" if os.path.lexists(named) or real.exists() else None
    policy = agent_policy()
    for project in dict.fromkeys((_common.REPO, _common.root().resolve())):
        trusted = [p for p in policy.protected_paths(project) if p.rsplit("/", 1)[-1] != SCRATCH]
        trusted += [p + "/requests" for p in policy.protected_paths(project) if p.rsplit("/", 1)[-1] == SCRATCH]
        for p in (named, real):
            rel = p.relative_to(project).as_posix() if p.is_relative_to(project) else None
            if why is None and rel is not None and (rel.endswith("goals.json") or policy.config_name(rel)
                                                    or any(rel == t or rel.startswith(t + "/") for t in trusted)):
                why = f"{rel} is the harness's (agent/policy.py protects it)"
    if why:
        raise Refused(f"--record-out {path}: {why}; a record goes to a new .json file of its own, not over goals.json, "
                      "harness/, records/, profiles/, quality/ or configuration (.claude/, .git/, ...)")


def write_record_file(path: Path, recs: list[dict[str, Any]]) -> None:
    """A --measure-only result: the experiments and their signature (harness/ledger/signing.py)."""
    body = {"experiments": recs}
    _common.atomic_write(path, json.dumps({**body, "signature": signing.sign(body)}, indent=1, default=str),
                         exclusive=True)


def read_record_file(path: Path, goals: dict[str, Any]) -> list[dict[str, Any]]:
    """The experiments of a record file that this key signed, each field checked; else Refused."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise Refused(f"cannot read record {path}: {e}") from None
    body = {"experiments": data.get("experiments")} if isinstance(data, dict) else None
    if body is None or not signing.verify(body, data.get("signature")):
        raise Refused(f"record {path} is not signed with this person's key ({signing.key_path()}): only a record "
                      "that run_experiment.py --measure-only wrote with it can be applied")
    recs = body["experiments"]
    if not isinstance(recs, list) or not recs:
        raise Refused(f"record {path} holds no experiments")
    for rec in recs:
        check_measured(rec, goals)
    return recs
