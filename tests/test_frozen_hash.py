"""The frozen hash covers what measures and decides, and nothing else (issue 42, item 3;
harness/frozen.py): an edit to a plot, the leaderboard view, the scaffold, a hook or a goals.json
rationale leaves it as it was; an edit to the sandbox, the session, the worker, the keep rule, the
adapter or a measuring key of goals.json changes it. In this process, on a copy of harness/ and agent/
and a toy target with an adapter package of its own, so nothing of the repository is edited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, TOY, use
from harness import frozen

UNCHANGED = ["harness/ledger/plots.py", "harness/ledger/leaderboard.py", "harness/ledger/store.py", "harness/cli/new_target.py",
             "harness/cli/person.py", "harness/cli/run_experiment.py", "harness/start.py", "agent/hooks/guard_frozen.py",
             "agent/policy.py"]
CHANGED = ["harness/sandbox/boundary.py", "harness/measure/session.py", "harness/worker/main.py", "harness/decide/keep_rule.py",
           "harness/sandbox/seccomp.py", "harness/decide/floor.py", "harness/target/finder.py",
           "harness/measure/shared.py", "harness/worker/worker_group.py", "target/hashtoy_e42/target.py"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("harness", "agent"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    ws = tmp_path / "target"
    ws.mkdir()
    shutil.copytree(TOY / "toymodel", ws / "hashtoy_e42")  # its own adapter package: edited below
    goals = json.loads((TOY / "goals.json").read_text())
    (ws / "goals.json").write_text(json.dumps(goals | {"adapter": "hashtoy_e42.target"}, indent=1))
    monkeypatch.setattr(frozen, "HARNESS", tmp_path / "harness")
    return tmp_path


def edited(path: Path, text: str) -> str:
    before = path.read_text()
    path.write_text(before + text)
    return before


def test_only_what_measures_and_decides_changes_the_hash(project: Path) -> None:
    with use(project / "target"):
        start = frozen.frozen_hash()
        for rel in UNCHANGED + CHANGED:
            path = project / rel
            before = edited(path, "\n# an edit\n")
            assert (frozen.frozen_hash() == start) == (rel in UNCHANGED), rel
            path.write_text(before)
        assert frozen.frozen_hash() == start
        goals_path = project / "target" / "goals.json"
        goals = json.loads(goals_path.read_text())
        for change, same in ((lambda g: g["gate"].__setitem__("rationale", "reworded"), True),
                             (lambda g: g.__setitem__("description", "reworded"), True),
                             (lambda g: g.__setitem__("noise_threshold_rationale", "why"), True),
                             (lambda g: g.__setitem__("noise_threshold", 0.02), False),
                             (lambda g: g["gate"].__setitem__("max_abs", 2e-4), False)):
            g = json.loads(json.dumps(goals))
            change(g)
            goals_path.write_text(json.dumps(g, indent=1) + "\n")
            assert (frozen.frozen_hash() == start) == same, g
