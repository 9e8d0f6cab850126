"""A broken candidate is answered in seconds (issue 43, item 5): on the VAE a syntax error was
reported after 3.5 minutes, once both workers had loaded the model and the keeper had been built
and warmed up. Now a candidate that does not compile is a crash row before any worker starts
(compile() runs none of its code); one whose import fails is a crash row as soon as the workers
have started: its worker imports it before loading the model (and loads none), and the harness
builds the candidate before the keeper, whose build and warm-up are skipped. Each row names the
candidate's line.

The toy target here loads its model in SLOW_LOAD_S seconds, as a large model does, so that a
model loaded, or not, shows in the worker's start time.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from conftest import TOY, add_record, make_assets, use
from harness import frozen, hashing, machine
from harness.ledger import results
from harness.ledger.store import Store
from harness.measure.session import Session
from test_run_experiment import run_here

SLOW_LOAD = '''"""The toy's adapter, its model SLOW_LOAD_S seconds to load (tests/test_fail_fast.py)."""
import os
import time

from toymodel import target as _toy
from toymodel.target import *  # noqa: F401,F403 - every function the harness calls


def load_model(device="cpu"):
    time.sleep(float(os.environ.get("SLOW_LOAD_S", "0")))
    return _toy.load_model(device)
'''
SYNTAX = '"""a typo"""\n\n\ndef build_decoder(model, example_input)\n    return model, {}\n'
IMPORT = '"""a module that is not there"""\nimport os\nimport no_such_module_anywhere\n\n\ndef build_decoder(model, x):\n    return model, {}\n'
LOAD_S = 10.0


@pytest.fixture
def slow_toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy with a slow model load and a baseline row for this machine (written here, not
    measured), so that a run times the candidate beside the fp32 eager baseline."""
    from harness import target
    from harness.cli.keepers import BASELINE

    # slowtoy's adapter imports the toy's package, which its goals.json does not declare (only the
    # adapter's is mapped): mapped here, as the toy's own tests map it, so that this file passes alone.
    target.use(TOY)
    ws = tmp_path / "toy"
    shutil.copytree(TOY, ws, ignore=shutil.ignore_patterns("__pycache__", "assets", "toymodel"))
    (ws / "toymodel").symlink_to(TOY / "toymodel", target_is_directory=True)
    (ws / "harness").symlink_to(Path(__file__).resolve().parent.parent / "harness", target_is_directory=True)
    (ws / "slowtoy").mkdir()
    (ws / "slowtoy" / "__init__.py").write_text("")
    (ws / "slowtoy" / "target.py").write_text(SLOW_LOAD)
    goals = json.loads((ws / "goals.json").read_text())
    (ws / "goals.json").write_text(json.dumps(goals | {"adapter": "slowtoy.target",
                                                       "worker_env": [*goals["worker_env"], "SLOW_LOAD_S"]}))
    make_assets(ws)
    with use(ws):
        add_record(ws, {"exp": "e001", "status": "baseline", "median_s": 0.05, "metric": 0.05, "spread_s": 0.001,
                        "preset": "tiny", "gpu": machine.env_info("cpu")["gpu"], "frozen_hash": frozen.frozen_hash(),
                        "candidate_sha": hashing.sha256_bytes(BASELINE.read_bytes())[:16], "desc": "baseline"})
    monkeypatch.setenv("SLOW_LOAD_S", str(LOAD_S))
    return ws


def test_a_broken_candidate_is_a_crash_in_seconds(slow_toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = slow_toy
    begun: list[str] = []  # which workers were built, in order
    begin = Session.begin

    def spy(self: Session, *args, **kwargs):  # noqa: ANN002, ANN003
        begun.append(self.candidate.name)
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(Session, "begin", spy)
    spawned: list[str] = []
    spawn = Session.spawn
    monkeypatch.setattr(Session, "spawn", lambda self: (spawned.append(self.candidate.name), spawn(self))[1])

    (ws / "optimize.py").write_text(SYNTAX)
    t0 = time.monotonic()
    rc, f, out = run_here(ws, "--desc", "a typo", "--no-profile", delay=0.05)
    took = time.monotonic() - t0
    assert rc == 1 and f["status"] == "crash", out
    assert f["reason"] == "candidate does not compile: SyntaxError: expected ':' (optimize.py line 4)", f["reason"]
    assert spawned == [] and took < LOAD_S, (spawned, took)  # no worker started at all

    (ws / "optimize.py").write_text(IMPORT)
    rc, f, out = run_here(ws, "--desc", "a missing module", "--no-profile", delay=0.05)
    assert rc == 1 and f["status"] == "crash", out
    assert f["reason"].startswith("candidate build raised ModuleNotFoundError: No module named 'no_such_module_anywhere'")
    assert f["reason"].endswith("(optimize.py line 3)"), f["reason"]
    assert begun == ["optimize.py"], begun  # the keeper was never built nor warmed up beside it
    facts = json.loads((ws / "records" / f"{f['exp']}.json").read_text())["facts"]
    assert facts["worker_load_s"] < LOAD_S, facts  # its worker's start: torch and its import, no model
    assert [r["status"] for r in results.read(ws / "results.tsv")] == ["baseline", "crash", "crash"]
    assert Store(ws / "records").source("e002") == SYNTAX  # on record, as any crash
