"""The harness never follows a link the agent made: optimize.py, candidates/ and PROGRESS.md linked to
a file the agent may not read (the signing key) are refused or left alone, before a run and while it
records (harness/sandbox/snapshot.py, harness/ledger/apply.py, harness/ledger/leaderboard.py, harness/cli/wave.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import wave
from harness.ledger import results, signing
from conftest import use
from test_agent_trust import baseline_record, key_dir, refused, write  # noqa: F401 - key_dir: a fixture
from test_run_experiment import run_here
from harness.errors import Refused


@pytest.fixture
def ws(toy: Path, tmp_path: Path, key_dir: Path) -> Path:  # noqa: F811
    """A git copy of the toy workspace (its assets linked: nothing here measures)."""
    out = tmp_path / "ws"
    shutil.copytree(toy, out, symlinks=True, ignore=shutil.ignore_patterns("runs", "assets"))
    (out / "assets").symlink_to(toy / "assets", target_is_directory=True)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=out, check=True)
    return out


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "record-key"
    path.parent.mkdir()
    path.write_bytes(os.urandom(32))
    return path


def linked(path: Path, to: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(to)


def test_a_linked_candidate_is_refused_before_any_worker(ws: Path, secret: Path):
    linked(ws / "optimize.py", secret)
    reason = refused(ws, "--desc", "x")
    assert "optimize.py: it is a link" in reason and secret.read_bytes().hex() not in reason


def test_a_wave_refuses_a_linked_variant_or_folder(ws: Path, secret: Path, capsys):
    (ws / "candidates").mkdir()
    linked(ws / "candidates" / "a.py", secret)
    with use(ws):
        assert wave.main([str(ws / "candidates" / "a.py"), "--device", "cpu"]) == 2
    assert "candidates/a.py: it is a link" in capsys.readouterr().err
    elsewhere = secret.parent / "variants"
    elsewhere.mkdir()
    (elsewhere / "b.py").write_text((ws / "optimize.py").read_text())
    (ws / "candidates" / "a.py").unlink()
    (ws / "candidates").rmdir()
    (ws / "candidates").symlink_to(elsewhere, target_is_directory=True)
    with use(ws):
        assert wave.main([str(ws / "candidates" / "b.py"), "--device", "cpu"]) == 2
    assert "candidates on its way is a link" in capsys.readouterr().err


def test_optimize_py_swapped_for_a_link_before_its_row_is_recorded(ws: Path, secret: Path):
    """The recording half (a record measured, then optimize.py became a link): refused, nothing
    recorded, the link neither read nor written through."""
    rec = baseline_record(candidate_file=str(ws / "optimize.py"))
    signed = write(ws.parent / "rec.json", [rec], signing.sign({"experiments": [rec]}))
    linked(ws / "optimize.py", secret)
    before = secret.read_bytes()
    assert "optimize.py: it is a link" in refused(ws, "--apply", str(signed))
    assert secret.read_bytes() == before and (ws / "optimize.py").is_symlink()


def test_progress_md_swapped_for_a_link_while_recording(ws: Path, secret: Path):
    """The row and its record are written and committed; the journal's log line is left out, the link
    neither read (no key in the commit) nor written through."""
    rec = baseline_record()
    signed = write(ws.parent / "rec.json", [rec], signing.sign({"experiments": [rec]}))
    linked(ws / "PROGRESS.md", secret)
    before = secret.read_bytes()
    rc, facts, out = run_here(ws, "--apply", str(signed))
    assert rc == 0 and facts["status"] == "baseline", out
    assert "no log line for e001 in PROGRESS.md: PROGRESS.md: it is a link" in out
    assert [r["exp"] for r in results.read(ws / "results.tsv")] == ["e001"]
    assert secret.read_bytes() == before and (ws / "PROGRESS.md").is_symlink()
    assert before.hex() not in out and not any(before in p.read_bytes() for p in ws.rglob("*") if p.is_file()
                                               and not p.is_symlink() and ".git" not in p.parts)


def test_the_persons_tools_read_no_link_either(ws: Path, secret: Path):
    """verify, bench and profile (harness/measure/session.py) read the candidate without following a link too:
    refused before any worker starts."""
    from harness.cli import verify
    linked(ws / "optimize.py", secret)
    with use(ws), pytest.raises(Refused, match="optimize.py: it is a link"):
        verify.check(device="cpu")
