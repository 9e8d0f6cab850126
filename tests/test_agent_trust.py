"""What the agent cannot fake: a record the harness did not sign, a record's fields, the interpreter.

The agent's side of these (the guard refuses --apply and --record-out to it, the sandbox hides the
key) is in tests/test_hooks.py and tests/test_claude_code_e2e.py; here the harness's own checks,
which hold for a person's command too: `--apply` records only what this person's key signed
(harness/ledger/signing.py), checks every field it uses, and takes no path from a record; a harness tool
refuses to start from a Python environment inside the project.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import make_toy, tool
from harness import _common as C
from harness.ledger import results, signing
from test_run_experiment import run_here


@pytest.fixture
def key_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "key"
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(folder))
    return folder


def test_sign_and_verify(key_dir: Path, monkeypatch: pytest.MonkeyPatch):
    record = {"experiments": [{"desc": "x", "facts": {"warmup_s": 12.5}}]}
    sig = signing.sign(record)
    key = key_dir / signing.KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == signing.KEY_BYTES
    assert signing.verify(json.loads(json.dumps(record)), sig)  # what a file read back holds
    record["experiments"][0]["facts"]["warmup_s"] = 1.0  # one figure edited
    assert not signing.verify(record, sig)
    assert not signing.verify(record, None)
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(key_dir.parent / "another-person"))
    assert not signing.verify({"experiments": [{"desc": "x", "facts": {"warmup_s": 12.5}}]}, sig)  # another key


def test_the_key_lives_outside_the_repository(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(signing.KEY_DIR_ENV)
    assert signing.key_dir() == Path.home() / ".config" / "auto-optim"
    assert not signing.key_dir().is_relative_to(C.REPO)


def baseline_record(**change) -> dict:
    """A record of the shape --measure-only writes: the toy's baseline, measured."""
    rec = {"desc": "baseline from the GPU machine", "preset": "tiny", "device": "cpu", "frozen_hash": "ab" * 8,
           "timestamp": "2026-11-23T17:00:00Z", "rebaseline": True, "candidate_file": "/elsewhere/fp32_eager.py",
           "profile_md": None, "profile": None, "strip_png": None, "gpu_index": "0", "source": "x = 1\n",
           "candidate_sha": "cd" * 8, "outcome": "measured", "reason": None, "metric": 0.4, "metric_spread": 0.01,
           "would_be": "baseline", "wall_s": 3.0, "no_profile": True,
           "facts": {"median_s": 0.4, "spread_s": 0.01, "min_s": 0.39, "max_s": 0.4, "warmup_s": 1.0, "gpu": "CPU (test)",
                     "passed": True, "quality": None, "max_abs": 0.0, "weights_kind": "synthetic"}}
    rec.update(change)
    return rec


def write(path: Path, recs: list[dict], signature: str | None) -> Path:
    body = {"experiments": recs}
    path.write_text(json.dumps({**body, **({"signature": signature} if signature else {})}))
    return path


@pytest.fixture
def ws(tmp_path: Path, key_dir: Path) -> Path:
    """harness/ copied, not linked: a defence that failed here must not overwrite the real one."""
    return make_toy(tmp_path / "ws", copy_harness=True, git=True)


def refused(ws: Path, *args: str) -> str:
    rc, facts, out = run_here(ws, *args)
    assert rc == 2 and facts["status"] == "refused", out
    assert not (ws / "results.tsv").exists() or results.read(ws / "results.tsv") == []
    return facts["reason"]


def test_apply_records_only_what_this_key_signed(ws: Path, tmp_path: Path):
    rec = baseline_record()
    rec["facts"]["quality"] = float("inf")  # a PSNR against an identical reference
    unsigned = write(tmp_path / "forged.json", [rec], None)
    assert "not signed with this person's key" in refused(ws, "--apply", str(unsigned))
    edited = write(tmp_path / "edited.json", [rec], signing.sign({"experiments": [baseline_record(metric=0.0001)]}))
    assert "not signed" in refused(ws, "--apply", str(edited))
    signed = write(tmp_path / "rec.json", [rec], signing.sign({"experiments": [rec]}))
    rc, facts, out = run_here(ws, "--apply", str(signed))
    assert rc == 0 and facts["status"] == "baseline", out
    assert [r["desc"] for r in results.read(ws / "results.tsv")] == ["baseline from the GPU machine"]


@pytest.mark.parametrize("change, field", [
    ({"preset": "../../../agent/hooks/guard_frozen"}, "preset"),
    ({"preset": "full-but-not-in-goals"}, "preset"),
    ({"desc": "two\tcells"}, "desc"),
    ({"outcome": "keep"}, "outcome"),
    ({"frozen_hash": "../x"}, "frozen_hash"),
    ({"metric": "fast"}, "metric"),
    ({"strip_png": "not base64 !"}, "strip_png"),
    ({"facts": {"median_s": float("nan"), "gpu": "CPU (test)"}}, "facts.median_s"),
    ({"facts": {"median_s": 0.4, "quality": float("nan"), "gpu": "CPU (test)"}}, "facts.quality"),
    ({"facts": {"median_s": 0.4, "gpu": "CPU (test)", "memory_check": {"gb": 24, "passed": "yes", "reason": ""}}},
     "facts.memory_check"),
])
def test_apply_checks_every_field_even_of_a_signed_record(ws: Path, tmp_path: Path, change: dict, field: str):
    """No path is ever taken from a record: a preset must be one of goals.json's."""
    rec = baseline_record(**change)
    signed = write(tmp_path / "rec.json", [rec], signing.sign({"experiments": [rec]}))
    assert field in refused(ws, "--apply", str(signed))
    assert not list(ws.rglob("best_*")) and not (ws / "records").exists()


@pytest.mark.parametrize("out", ["goals.json", "harness/nofollow.py", "harness/x.json", "agent/hooks/x.json",
                                 "records/e001.json", "rec.txt", ".claude/settings.json", ".claude/settings.local.json",
                                 ".git/x.json", "targets/other/goals.json", "candidates/.mcp.json", "assets/x.json",
                                 "optimize.json"])
def test_record_out_never_overwrites_what_the_harness_trusts(ws: Path, out: str):
    """Issue 40: --record-out wrote over .claude/settings.json (Claude Code reloaded it: no deny rule,
    no hook). Now a new .json only, outside the harness's files and configuration."""
    (ws / ".claude").mkdir(exist_ok=True)
    (ws / ".claude" / "settings.json").write_text("{}")
    (ws / "optimize.json").write_text("{}")  # any file that exists: never written over
    before = {p: p.read_bytes() for p in (ws / "goals.json", ws / "harness" / "nofollow.py",
                                          ws / ".claude" / "settings.json", ws / "optimize.json")}
    reason = refused(ws, "--desc", "x", "--measure-only", "--record-out", str(ws / out))
    assert "--record-out" in reason
    assert all(p.read_bytes() == data for p, data in before.items())
    assert not (ws / ".claude" / "settings.local.json").exists() and not (ws / "targets").exists()
    assert not (ws / "assets" / "x.json").exists()


def test_untrusted_python():
    project = Path("/work/project")
    assert C.untrusted_python("/usr", "/usr/bin/python3", ["/usr/lib/python3/dist-packages"], [project]) is None
    assert "environment" in C.untrusted_python("/work/project/.venv", "/work/project/.venv/bin/python", [], [project])
    assert "site-packages" in C.untrusted_python("/usr", "/usr/bin/python3",
                                                 ["/work/project/lib/python3.11/site-packages"], [project])
    assert C.untrusted_python("/usr", "/usr/bin/python3", ["/work/project", "/work/project/harness"], [project]) is None


def test_a_tool_refuses_an_interpreter_whose_packages_are_in_the_project(tmp_path: Path):
    """One line, exit 2, before the tool does anything (PYTHONPATH stands in for a venv's site-packages)."""
    ws = make_toy(tmp_path / "ws")
    planted = ws / "lib" / "site-packages"
    planted.mkdir(parents=True)
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json"), "PYTHONPATH": str(planted)}
    p = subprocess.run([*tool("harness.cli.verify", ws)], cwd=ws, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "inside the project" in p.stderr
