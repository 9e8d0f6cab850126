"""Nothing recorded is ever lost (issue 24, item 1): results.tsv is written from records/, so a
deleted or shortened one loses nothing; a record missing (that git's last commit or a row holds) is
refused with one line, and `auto-optim records restore` puts it back; a record nobody signed is
refused; a cut-off row is refused with its line number; a record file is never written over;
Ctrl-C is one line and exit 130.

The experiments run in this process (test_run_experiment.run_here: the same main, its workers
processes of their own), but for Ctrl-C's, which goes to a command line's process group.
"""

from __future__ import annotations

import json
import re
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import add_record, make_toy, tool, use
from harness import _common as C
from harness.ledger import cli, results, rows as R
from harness.ledger.record import MEASURED_FIELDS, Record
from harness.ledger.store import Store
from test_run_experiment import candidate, git, run_here
from harness.errors import Refused

# The frozen toy model's sleep per call here, and a slower candidate's: a revert by construction.
# Smaller than test_run_experiment's (0.4 and 0.6 s): a revert needs the candidate slower, not a
# margin over the machine's noise as a keep does, and these runs only set the stage.
DELAY, SLOW = 0.05, 0.1


def measured(ws: Path, *args: str) -> tuple[int, dict, str]:
    """run_here, the toy model sleeping DELAY a call."""
    return run_here(ws, *args, delay=DELAY)

LEGACY_ROW = ["e001", "abc", "t", "old", "baseline", "2.0", "0.1", "54.0", "0.02", "1.0", "H100", "full", "synthetic",
              "ffff", "aaaa", "torch"]


def refused_in_one_line(out: str, f: dict) -> None:
    assert f["status"] == "refused", out
    stderr_lines = [ln for ln in out.splitlines() if ln.startswith("run_experiment: refused:")]  # stderr's one line
    assert len(stderr_lines) == 1 and "\n" not in f["reason"], out


def test_results_tsv_is_written_again_and_records_are_refused_then_restored(tmp_path: Path) -> None:
    """results.tsv is a view of records/ (issue 42, item 4): deleted or cut short, it loses nothing
    and the next record writes it whole again (what a run checks up front lets it through); a row
    it holds whose record is gone is refused, as a record git's last commit holds is (issue 43)."""
    ws = make_toy(tmp_path / "toy", git=True)
    (ws / "optimize.py").write_text(candidate(SLOW))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "slow"], cwd=ws, check=True)
    # A baseline (committed with its record) and a slower candidate: a revert, whose record is not committed.
    rc, f, out = measured(ws, "--desc", "first run", "--no-profile")
    assert rc == 0 and f["exps"] == ["e001", "e002"] and f["status"] == "revert", out  # measured and recorded: 0
    results_tsv = ws / "results.tsv"
    full = results_tsv.read_text()
    assert git(ws, "show", "HEAD:results.tsv") != full  # e002's row exists only in the file and its record
    for damage in (results_tsv.unlink, lambda: results_tsv.write_text(R.HEADER),
                   lambda: results_tsv.write_text("".join(full.splitlines(True)[:2]))):
        damage()  # the issue's `rm results.tsv`, or rows gone: records/ still holds every one
        with use(ws):
            results.check_complete()  # no loss: a run goes on
            assert results.write() == results.read(results_tsv)
        assert results_tsv.read_text() == full  # byte for byte, the uncommitted row included
    records_refused_then_restored(ws)  # records/ too (issue 43)
    rc, f, out = measured(ws, "--desc", "after the restore", "--no-profile")
    assert rc == 0 and f["exp"] == "e003", out


def records_refused_then_restored(ws: Path) -> None:
    """Issue 43: with records/ deleted the next run went on (a RERUN row, 120 records gone), while a
    deleted results.tsv was refused. Now records/ is checked: a record git's last commit holds, or
    one a row of results.tsv names, missing, is refused in one line naming the command that restores
    it, which takes them from git; a record no commit holds is written as lost, from its row.
    (A workspace after a first run: e001 committed with its record, e002's record not yet.)"""
    folder = ws / "records"
    kept = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    results_text = (ws / "results.tsv").read_text()

    def refused(which: str) -> None:
        rc, f, out = run_here(ws, "--desc", "x", "--no-profile")  # before any worker starts
        assert rc == 2 and f"records/ lacks {which}" in f["reason"] and "auto-optim records restore" in f["reason"], out
        refused_in_one_line(out, f)
        assert (ws / "results.tsv").read_text() == results_text

    (folder / "e001.json").unlink()  # one row's record
    refused("1 record (e001)")
    shutil.rmtree(folder)  # the issue's `rm -rf records`
    refused("2 records (e001..e002)")
    with use(ws):
        assert results.restore() == (["e001"], ["e002"])  # e001 from git; e002 no commit holds
    assert (ws / "results.tsv").read_text() == results_text  # the rows were never gone
    assert (folder / "e001.json").read_bytes() == kept["e001.json"]
    lost = json.loads((folder / "e002.json").read_text())
    assert "no commit held it" in lost["lost"] and lost["exp"] == "e002"
    with use(ws):
        assert Store.here().read("e002").row() == results.read()[1]  # its row, as it was
        assert Store.here().source("e001") is not None  # the baseline's source, back from git with its record
        results.check_complete()
        with pytest.raises(Refused, match="holds no candidate source"):
            cli.source("e002")


def test_a_record_nobody_signed_is_refused(tmp_path: Path) -> None:
    """A record the harness did not write (not signed with this key, and not as git's last commit
    holds it) is refused before anything is recorded; so is one changed after it was signed."""
    ws = make_toy(tmp_path / "toy", git=True)
    with use(ws):
        add_record(ws, {"exp": "e001", "status": "baseline", "median_s": 1.0, "preset": "tiny", "desc": "b"})
        results.check_complete()  # signed with this run's key
        planted = ws / "records" / "e002.json"
        planted.write_text(json.dumps(Record(exp="e002", status="keep", desc="faster", preset="tiny").to_json()))
        with pytest.raises(Refused, match="records/e002.json is neither as git's last commit holds it nor signed"):
            results.check_complete()
        planted.unlink()
        signed = json.loads((ws / "records" / "e001.json").read_text())
        (ws / "records" / "e001.json").write_text(json.dumps(signed | {"desc": "edited"}))
        with pytest.raises(Refused, match="records/e001.json is neither"):
            results.check_complete()


def test_restore_refuses_what_it_cannot_put_back(tmp_path: Path) -> None:
    ws = tmp_path
    path = ws / "results.tsv"
    line = "\t".join(["e001", "x", "t", "d", "baseline", "1"] + ["x"] * (len(R.COLUMNS) - 6)) + "\n"
    path.write_text(R.HEADER + line[:-5] + "\n")  # e001's line cut short, and no record of it
    with pytest.raises(Refused, match="line 2 .*e001.* no commit or record holds that row"):
        results.restore(Store(ws / "records"), path)
    assert path.read_text() == R.HEADER + line[:-5] + "\n"  # nothing written


def test_cut_off_rows_are_refused_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "results.tsv"
    full = "\t".join(["e002"] + ["x"] * (len(R.COLUMNS) - 1))
    path.write_text(R.HEADER + "\t".join(LEGACY_ROW) + "\n" + full + "\n")
    assert len(results.read(path)) == 2  # a legacy row before the first full one is read as it is
    path.write_text(R.HEADER + "\t".join(LEGACY_ROW) + "\n" + full + "\n" + full[:full.rindex("\tx\tx\tx")] + "\n")
    with pytest.raises(Refused, match="line 4 has 16 cells, expected 19"):
        results.read(path)
    path.write_text(R.HEADER + full + "\n" + full[:-3])  # the last line has no newline: cut off mid-write
    with pytest.raises(Refused, match="line 3 is cut off"):
        results.read(path)


def test_a_record_is_never_written_over(tmp_path: Path) -> None:
    rec = tmp_path / "records" / "e001.json"
    C.atomic_write(rec, "first", exclusive=True)
    with pytest.raises(Refused, match="never written over"):
        C.atomic_write(rec, "second", exclusive=True)
    assert rec.read_text() == "first" and [p.name for p in rec.parent.iterdir()] == ["e001.json"]


def test_apply_refuses_to_write_over_a_stray_record(tmp_path: Path) -> None:
    """A profile or record already named for the next exp is never replaced: apply refuses first."""
    from harness.cli import run_experiment

    ws = make_toy(tmp_path / "toy", git=True)
    rc, f, out = measured(ws, "--desc", "first run", "--no-profile")
    assert rc == 0, out
    stray = ws / "profiles" / "e003.md"  # e001 baseline, e002 the candidate: the next is e003
    stray.parent.mkdir(exist_ok=True)
    stray.write_text("someone's notes")
    before = (ws / "results.tsv").read_text()
    stored = json.loads((ws / "records" / "e002.json").read_text())  # the same record again, as apply gets it
    rec = {k: v for k, v in stored.items() if k in MEASURED_FIELDS or k in ("would_be", "gpu_index")}
    rec["source"] = Store(ws / "records").source("e002")
    with use(ws), pytest.raises(Refused, match="profiles/e003.md exists"):
        run_experiment.apply(rec, C.load_goals())
    assert stray.read_text() == "someone's notes" and (ws / "results.tsv").read_text() == before
    assert not (ws / "records" / "e003.json").exists()


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    ws = make_toy(tmp_path / "toy", git=True)
    (ws / "optimize.py").write_text(candidate(0.0, build="    import time; time.sleep(60)\n"))
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}
    # SIGINT at its default, as a terminal's shell starts a command: a pytest started in the
    # background by a script ignores SIGINT, and a Python started so never raises KeyboardInterrupt.
    p = subprocess.Popen([*tool("harness.cli.run_experiment", ws), "--desc", "x"], cwd=ws, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # Inside the measurement: both workers up (the baseline's is running) and the candidate's build,
    # which sleeps, begun; its phase line on stderr says so (read unbuffered from the descriptor, so
    # that communicate() below gets the rest). It was a fixed 3 s after the device lock: ~1 s later.
    begun, deadline = b"", time.monotonic() + 120
    while b"building and warming up the candidate" not in begun and time.monotonic() < deadline:
        if select.select([p.stderr], [], [], 1)[0]:
            chunk = os.read(p.stderr.fileno(), 4096)
            if not chunk:
                break
            begun += chunk
    time.sleep(0.5)  # its build request on its way
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole foreground group
    out, err = p.communicate(timeout=60)
    err = begun.decode() + err
    assert p.returncode == 130, out + err
    said = [ln for ln in err.strip().splitlines() if not re.match(r"\[ *[\d.]+ s\] ", ln)]  # less the phase lines
    assert said == ["run_experiment: interrupted (Ctrl-C); nothing recorded for the experiment "
                                        "in progress; the rows recorded before it stay"], err
    assert not (ws / "results.tsv").exists() or len(results.read(ws / "results.tsv")) == 0


def test_uncommitted_target_refused_up_front(tmp_path: Path) -> None:
    """The issue's retarget: tests/toy_target copied to targets/toy of a repository and run before
    it is committed. Refused in one line before anything is measured or recorded; once committed,
    the first run records its baseline and its candidate (a revert, restored from git)."""
    repo = tmp_path / "repo"
    ws = make_toy(repo / "targets" / "toy")
    (ws / "optimize.py").write_text(candidate(SLOW))  # a revert by construction, restored from git
    (ws / "split.py").write_text("# code the adapter would run, frozen by goals.json\n")
    (ws / "goals.json").write_text(json.dumps(json.loads((ws / "goals.json").read_text()) | {"frozen": ["split.py"]}))
    (repo / "README.md").write_text("a project\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "README.md"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=repo, check=True)
    rc, f, out = run_here(ws, "--desc", "x", "--no-profile")  # refused before any worker starts
    assert rc == 2 and "targets/toy/goals.json, targets/toy/optimize.py, targets/toy/toymodel, targets/toy/split.py" in f["reason"], out
    assert "git add targets/toy" in f["reason"], out
    refused_in_one_line(out, f)
    assert not (ws / "results.tsv").exists() and not (ws / "records").exists()
    subprocess.run(["git", "add", "targets"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "target toy"], cwd=repo, check=True)
    rc, f, out = measured(ws, "--desc", "x", "--no-profile")
    assert rc == 0 and [r["status"] for r in results.read(ws / "results.tsv")] in (["baseline", "revert"],
                                                                              ["baseline", "inconclusive"]), out
    assert "optimize.py is already e001's code (commit " in out, out  # git show worked


def test_a_copy_without_a_readable_git_is_no_repository(tmp_path: Path) -> None:
    """A GPU machine's copy of the tree may carry a .git that git cannot read: its rows are "nogit",
    not refused as "not committed" (session 20's H100 refused its own --apply of the rebaseline)."""
    from harness.ledger import apply

    ws = make_toy(tmp_path / "copy")
    (tmp_path / "copy" / ".git").mkdir(exist_ok=True)  # an empty folder where the repository would be
    with use(ws):
        assert apply.git_repo() is None


def test_records_show_one_experiment_or_refuse(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`auto-optim records show EXP` prints that row alone; an experiment with no row is refused in
    one line (exit 2), and one given to an action that takes none is an argument error, not ignored."""
    ws = make_toy(tmp_path / "toy")
    with use(ws):
        add_record(ws, {"exp": "e001", "status": "baseline", "median_s": 1.0, "preset": "tiny", "desc": "b"})
        add_record(ws, {"exp": "e002", "status": "keep", "median_s": 0.5, "preset": "tiny", "desc": "faster"})
        capsys.readouterr()
        assert cli.main(["show", "e002"]) == 0
        shown = capsys.readouterr().out.splitlines()
        assert shown[0].startswith("e002  keep") and not any(line.startswith("e001") for line in shown), shown
        assert cli.main(["show", "e009"]) == 2
        assert capsys.readouterr().err.strip() == "records: no record e009 in records/"
        with pytest.raises(SystemExit) as exit_:
            cli.main(["leaderboard", "e002"])
        assert exit_.value.code == 2 and "takes no experiment" in capsys.readouterr().err
