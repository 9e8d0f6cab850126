"""run_experiment end to end on the toy target, plus decide() and the record files.

Latency "by construction": the toy model sleeps TOY_DELAY_S per call (the fp32 eager baseline
pays it in full) and candidates set their own sleep, so keep/revert never hangs on CPU noise.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import re
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import add_record, make_toy, rows_of, tool, use
from harness import frozen, hashing
from harness.cli import run_experiment
from harness.decide import keep_rule as K
from harness.ledger import cli, leaderboard, results, rows as R
from harness.errors import Refused
from harness.ledger.record import Record
from harness.ledger.store import Store

DELAY = 0.4                      # the frozen toy model's cost per call
SLOW, MEDIUM, FAST = 0.3, 0.2, 0.05  # SLOW only makes reverts: slower than MEDIUM needs no margin over noise


def candidate(sleep: float = 0.0, body: str = "return model(x)", build: str = "") -> str:
    return (f'"""toy candidate"""\n\n\ndef build_decoder(model, example_input):\n{build}'
            f"    model.delay = {sleep}\n\n    def forward_fn(x):\n        {body}\n\n"
            f'    return forward_fn, {{"sleep": {sleep}}}\n')


def run(ws: Path, *args: str, delay: float = DELAY) -> tuple[int, dict, str]:
    """`python harness/cli/run_experiment.py ARGS` in the workspace: exit code, its JSON line, its
    output. The toy model sleeps `delay` a call (TOY_DELAY_S)."""
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json"), "TOY_DELAY_S": str(delay)}
    p = subprocess.run([*tool("harness.cli.run_experiment", ws), *args], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p.returncode, (json.loads(lines[-1]) if lines else {}), p.stdout + p.stderr


def run_here(ws: Path, *args: str, delay: float = DELAY) -> tuple[int, dict, str]:
    """run(), as run_experiment.main in this process: the same code and the same three answers
    without an interpreter start per run (the worker that measures is still a process of its own,
    and the toy model reads TOY_DELAY_S, `delay`, there). For workspaces whose harness/ is this
    checkout's."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.get("TOY_DELAY_S")
    os.environ["TOY_DELAY_S"] = str(delay)
    try:
        with use(ws), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_experiment.main(list(args))
    finally:
        if saved is None:
            os.environ.pop("TOY_DELAY_S")
        else:
            os.environ["TOY_DELAY_S"] = saved
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("{")]
    return code, (json.loads(lines[-1]) if lines else {}), out.getvalue() + err.getvalue()


def rows(ws: Path) -> list[dict[str, str]]:
    return results.read(ws / "results.tsv")


def git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True).stdout


def test_keep_rule() -> None:
    """The verdict from paired calls (keeper seconds beside candidate seconds): a keep needs the
    interval's lower end above the noise threshold, and the noise (the interval's width, each
    member's own spread) narrower than that gain; a revert, its upper end at or below the
    threshold; anything else is inconclusive. The reason says which case it is."""
    keeper = [1.0, 1.01, 0.99, 1.005, 1.0, 0.995]
    faster = [t / 1.10 for t in keeper]   # 10% faster in every pair
    c = K.compare(faster, keeper)
    assert c.pairs == 6 and abs(c.gain - 0.10) < 1e-9 and c.confidence > 0.95 and c.calls_spread < 0.03
    v = K.verdict(c, 0.01, keeper="e002")
    assert v.status == "keep" and v.reason.startswith("kept: faster than e002 by 10.0% (97% CI +10.0%..+10.0%")
    same = [t * f for t, f in zip(keeper, (1.02, 0.99, 1.01, 0.98, 1.0, 1.015))]
    v = K.verdict(K.compare(same, keeper), 0.01)
    assert v.status == "inconclusive" and v.reason.startswith("inconclusive: not kept, run again on a quieter machine")
    assert "spans the 1% noise threshold" in v.reason and "CI" in v.reason
    v = K.verdict(K.compare([t * 1.2 for t in keeper], keeper), 0.01)
    assert v.status == "revert" and "slower than the keeper by 16.7%" in v.reason
    v = K.verdict(K.compare([t / 1.005 for t in keeper], keeper), 0.01)  # faster, but inside the threshold
    assert v.status == "revert" and "no faster than the keeper beyond the 1% noise threshold" in v.reason
    # One slow pair in six does not make a keep (the interval's lower end is the worst pair's).
    v = K.verdict(K.compare(faster[:5] + [keeper[5] * 1.1], keeper), 0.01)
    assert v.status == "inconclusive"
    # Six pairs all faster, but spread wider than the gain they all show: noise, not kept.
    v = K.verdict(K.compare([1 / (1 + g) for g in (0.02, 0.05, 0.1, 0.2, 0.4, 0.6)], [1.0] * 6), 0.01)
    assert v.status == "inconclusive" and "more than the 2.0% gain every pair shows" in v.reason, v.reason
    # Not timed beside the current keeper: nothing judges it (no figure recorded at another time).
    v = K.judge({"times_s": [0.9] * 6, "median_s": 0.9}, 0.9, 0.01, "lower", K.Keeper("e002", "ab", 1.0))
    assert v.status == "inconclusive" and "not timed beside e002" in v.reason
    # The warm-up rule: no slower beyond the threshold, at the interval's confidence, and a warm-up
    # shorter by the asked fraction (e041's case: 15.4 s against 18.6 s, 17% shorter).
    tie = K.compare([t * 1.002 for t in keeper], keeper)
    assert K.verdict(tie, 0.01, warmup=(15.4, 18.6, 0.15)).status == "keep"
    assert K.verdict(tie, 0.01, warmup=(16.5, 18.6, 0.15)).status == "revert"  # 11% shorter: not enough
    slower = K.compare([t * 1.02 for t in keeper], keeper)
    assert K.verdict(slower, 0.01, warmup=(5.0, 18.6, 0.15)).status == "revert"  # a slower call buys nothing
    # A throughput target: 110 work/s beside the keeper's 100.
    rec_facts = {"times_s": [1 / 110] * 6, "median_s": 1 / 110, "paired": {"keeper_sha": "ab", "keeper_times_s": [1 / 100] * 6}}
    assert K.judge(rec_facts, 110.0, 0.01, "higher", K.Keeper("e002", "ab", 100.0)).status == "keep"
    assert K.judge(rec_facts, 110.0, 0.01, "higher", None).status == "baseline"


def test_a_wide_keeper_spread_blocks_nothing() -> None:
    """Issue 24: a keeper whose timed calls once spread 3.38 s blocked every later keep (a keep had
    to beat it by more than either spread). Its row's spread is not used: the keeper measured
    beside the candidate decides, and only this run's own noise weighs against the gain."""
    keeper = K.Keeper("e002", "abcd" * 4, 5.27)
    facts = {"times_s": [4.0, 4.1, 3.9, 4.0, 4.05, 4.0], "median_s": 4.0,
             "paired": {"keeper_sha": "abcd" * 4, "keeper_times_s": [5.2, 5.35, 5.3, 5.31, 5.25, 5.3]}}
    v = K.judge(facts, 4.0, 0.01, "lower", keeper)
    assert v.status == "keep" and v.comparison.low > 0.2
    # Beside it this time, one keeper call slowed by a burst (8.7 s): its calls spread 67%, more than
    # the 30% gain every pair shows. Not kept on such a run, not reverted either.
    facts["paired"]["keeper_times_s"][1] = 8.7
    v = K.judge(facts, 4.0, 0.01, "lower", keeper)
    assert v.status == "inconclusive" and "the timed calls of one of them spread 67.3% wide, more than the 29.6% gain" in v.reason, v.reason


def test_records_written_once_and_results_tsv_made_from_them(tmp_path: Path) -> None:
    """A record is written once (the store refuses to write over one), results.tsv is written whole from
    records/ (one row each, a desc's tabs and newlines flattened), and a results.tsv that says other
    than records/ is refused before anything is recorded, with the command that writes it again."""
    base = {"exp": "e001", "status": "baseline", "median_s": 1.0, "metric": 1.0, "preset": "tiny", "spread_s": 0.0,
            "desc": "a\tb\nc", "gpu": "g", "frozen_hash": "ab12cd34", "candidate_sha": "00ff00ff"}
    add_record(tmp_path, base)
    before = (tmp_path / "results.tsv").read_text()
    got = add_record(tmp_path, base | {"exp": R.next_exp_id(results.read(tmp_path / "results.tsv")), "status": "keep",
                                       "median_s": 0.5, "metric": 0.5})
    after = (tmp_path / "results.tsv").read_text()
    assert after.startswith(before) and len(after.splitlines()) == 3 and results.read(tmp_path / "results.tsv") == got
    assert [r["exp"] for r in got] == ["e001", "e002"] and got[0]["desc"] == "a b c"
    assert R.best_row(got, "tiny")["exp"] == "e002" and R.baseline_row(got, "tiny")["exp"] == "e001"
    assert R.best_row(got, "tiny", better="higher")["exp"] == "e001"
    with pytest.raises(Refused, match="never written over"):
        add_record(tmp_path, base)
    with pytest.raises(Refused, match="the record's status is not what the store writes"):  # a status no row may have
        add_record(tmp_path, base | {"exp": "e003", "status": "great"})
    assert (tmp_path / "results.tsv").read_text() == after and Store(tmp_path / "records").exps() == ["e001", "e002"]
    store = Store(tmp_path / "records")
    (tmp_path / "results.tsv").write_text(after + "broken line\n")  # a damaged file is refused, and says how to repair it
    with pytest.raises(Refused, match="line 4 has 1 cells.*auto-optim records restore"):
        results.check_complete(store, tmp_path / "results.tsv")
    (tmp_path / "results.tsv").write_text(after.replace("\t0.5\t", "\t0.4\t", 1))  # a figure edited by hand
    with pytest.raises(Refused, match="row e002 is not the row records/e002.json makes"):
        results.check_complete(store, tmp_path / "results.tsv")
    assert results.restore(store, tmp_path / "results.tsv") == ([], [])  # written again from records/
    assert (tmp_path / "results.tsv").read_text() == after
    prog = tmp_path / "PROGRESS.md"
    leaderboard.append_progress("e001 baseline", prog)
    leaderboard.append_progress("e002 keep", prog)
    text = prog.read_text()
    assert "## Dead ends" in text and text.endswith("## Log\n\n- e001 baseline\n- e002 keep\n")
    md = leaderboard.write_leaderboard(got, tmp_path / "leaderboard.md")
    assert "Generated" in md and md.index("| e002 |") < md.index("| e001 |")
    # A new baseline starts a comparison: its keepers are ranked first, apart from the faster e002.
    later = got + [got[0] | {"exp": "e003", "median_s": "2.0", "metric": "2.0"},
                   got[0] | {"exp": "e004", "status": "keep", "median_s": "1.5", "metric": "1.5"}]
    md = leaderboard.write_leaderboard(later, tmp_path / "leaderboard.md")
    assert md.index("| 1 | e004 |") < md.index("| 2 | e003 |") < md.index("Earlier comparisons") < md.index("| 1 | e002 |")


def test_legacy_rows_are_read(tmp_path: Path) -> None:
    """Rows written before the worker harness (16 cells, psnr_db) are read as they are: their missing cells "-"."""
    path = tmp_path / "results.tsv"
    legacy = "\t".join(R.LEGACY_COLUMNS) + "\n" + "\t".join(
        ["e001", "abc", "t", "old", "baseline", "2.0", "0.1", "54.0", "0.02", "1.0", "H100", "full", "synthetic",
         "ffff", "aaaa", "torch"]) + "\n"
    path.write_text(legacy)
    got = results.read(path)
    assert got[0]["quality"] == "54.0" and got[0]["wall_s"] == "-" and R.metric_value(got[0]) == 2.0


def test_flow(tmp_path: Path) -> None:
    """One sequence (each run starts a worker or two): the first run's baseline, every status,
    restores, a --candidate file left alone, append-only records, commits, the leaderboard,
    measure-only + apply, re-runs, the frozen hash. In this process (run_here); the command line
    itself runs in test_tampering_voids_the_run, test_agent_dry_run.py and test_retarget.py."""
    ws = make_toy(tmp_path / "toy", git=True)
    opt = ws / "optimize.py"
    opt.write_text(medium := candidate(MEDIUM))
    subprocess.run(["git", "commit", "-qam", "medium"], cwd=ws, check=True)
    history: list[str] = []

    def grows() -> None:
        text = (ws / "results.tsv").read_text()
        assert not history or text.startswith(history[-1])
        history.append(text)

    # The first run on a machine: the frozen model's fp32 eager baseline, then optimize.py against it.
    rc, f, out = run_here(ws, "--desc", "first run")
    assert rc == 0 and f["exps"] == ["e001", "e002"] and f["status"] == "keep", out
    phases = [re.sub(r"^\[ *[\d.]+ s\] ", "", ln) for ln in out.splitlines() if re.match(r"\[ *[\d.]+ s\] ", ln)]
    want = ["starting the workers", "building and warming up the candidate", "building and warming up the keeper",
            *(f"measured pair {n}/" for n in range(1, 7)), "profiling the keeper-to-be"]  # one line a phase, in order
    assert len(phases) == len(want) and all(p.startswith(w) for p, w in zip(phases, want)), phases
    grows()
    assert [r["status"] for r in rows(ws)] == ["baseline", "keep"]
    assert float(rows(ws)[1]["speedup_vs_fp32"]) > 1.5 and rows(ws)[0]["sandbox"].startswith("bwrap")
    assert float(rows(ws)[0]["wall_s"]) > 0 and "None" not in out
    assert (ws / "profiles" / "e002.md").is_file() and "e002: " in git(ws, "log", "--format=%s")
    strip = ws / "quality" / "e002.png"  # the keeper's quality strip, committed with its record
    assert strip.read_bytes().startswith(b"\x89PNG") and "quality/e002.png" in git(ws, "ls-files")
    assert json.loads((ws / "records" / "e001.json").read_text())["status"] == "baseline"
    # The record points at the strip and the profile (path and sha256) and holds no copy of either.
    rec = json.loads((ws / "records" / "e002.json").read_text())
    assert "strip_png" not in rec and "profile_md" not in rec and rec["verdict"].startswith("kept: faster than e001")
    for key, path in (("strip_file", strip), ("profile_file", ws / "profiles" / "e002.md")):
        assert rec[key] == {"path": path.relative_to(ws).as_posix(), "sha256": hashing.sha256_bytes(path.read_bytes())}

    for text, status, extra in [(candidate(SLOW), "revert", []),                      # slower
                                (candidate(FAST, body="return model(x) * 0.5"), "gate_fail", []),
                                (candidate(FAST, body="raise RuntimeError('boom')"), "crash", []),
                                (candidate(FAST, build="    import time; time.sleep(120)\n"), "timeout",
                                 ["--timeout", "3"])]:
        opt.write_text(text)
        rc, f, out = run_here(ws, "--desc", status, *extra)
        assert rc == (0 if status == "revert" else 1) and f["status"] == status, out  # 0: measured and recorded
        assert opt.read_text() == medium, f"{status}: optimize.py not restored byte for byte"
        record = json.loads((ws / "records" / f"{f['exp']}.json").read_text())
        assert "strip_png" not in record and "source" not in record  # no picture; the source once, by its hash
        assert (ws / "records" / "sources" / f"{record['source_sha256']}.py").read_text() == text
        # ... and the run says so, with the command that brings it back (issue 43)
        assert "source is kept in records/" in out and f"auto-optim records source {f['exp']} > optimize.py" in out, out
        with use(ws), contextlib.redirect_stdout(io.StringIO()) as printed:
            assert cli.main(["source", f["exp"]]) == 0
        assert printed.getvalue() == text
        grows()

    # A --candidate file, untracked: never modified; a crash is a row; a keeper becomes optimize.py.
    other = tmp_path / "elsewhere.py"
    other.write_text(broken := candidate(FAST, body="raise RuntimeError('boom')"))
    rc, f, out = run_here(ws, "--desc", "untracked crash", "--candidate", str(other))
    assert rc == 1 and f["status"] == "crash" and other.read_text() == broken and opt.read_text() == medium, out
    grows()
    other.write_text(fast := candidate(FAST))
    rc, f, out = run_here(ws, "--desc", "untracked keeper", "--candidate", str(other), "--no-profile")
    assert rc == 0 and f["status"] == "keep" and other.read_text() == fast and opt.read_text() == fast, out
    assert git(ws, "show", "HEAD~1:optimize.py") == fast  # committed as optimize.py
    grows()

    # A second experiment while one runs: refused at once, nothing recorded.
    lock = open(ws / "runs" / "run_experiment.lock", "a+")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    rc, f, out = run_here(ws, "--desc", "concurrent")
    lock.close()
    assert rc == 2 and "another experiment is running" in f["reason"], out
    assert (ws / "results.tsv").read_text() == history[-1]

    # The GPU machine: a copy without .git; its measuring records nothing there.
    gpu = tmp_path / "gpu"
    shutil.copytree(ws, gpu, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    (gpu / "optimize.py").write_text(fast)
    rc, f, out = run_here(gpu, "--desc", "the same source again", "--measure-only", "--record-out", str(gpu / "rec.json"))
    assert rc == 0 and f["outcomes"] == ["measured"], out
    rec = json.loads((gpu / "rec.json").read_text())["experiments"][0]
    assert rec["source"] == fast and rec["would_be"] == "rerun"
    assert (gpu / "results.tsv").read_text() == history[-1]
    with use(ws):
        assert run_experiment.main(["--apply", str(gpu / "rec.json")]) in (0, 1)  # 0 when within the noise
    grows()
    last = rows(ws)[-1]
    assert (last["status"], last["commit"]) == ("rerun", "-") and opt.read_text() == fast
    assert "re-run of e008" in (ws / "PROGRESS.md").read_text().splitlines()[-1]
    assert [r["status"] for r in rows(ws)] == ["baseline", "keep", "revert", "gate_fail", "crash", "timeout",
                                              "crash", "keep", "rerun"]
    board = (ws / "leaderboard.md").read_text()
    assert board.index("| e008 |") < board.index("| e002 |") < board.index("| e001 |") and "| e003 |" not in board

    # A changed frozen file: refused, nothing recorded, until a person re-baselines.
    goals = json.loads((ws / "goals.json").read_text())
    (ws / "goals.json").write_text(json.dumps(goals | {"noise_threshold": 0.02}))
    rc, f, out = run_here(ws, "--desc", "after a goals edit", "--no-profile")
    assert rc == 2 and "--rebaseline" in f["reason"], out
    assert (ws / "results.tsv").read_text() == history[-1]
    rc, f, out = run_here(ws, "--desc", "new comparison", "--rebaseline", "--no-profile")
    assert rc in (0, 1) and [r["status"] for r in rows(ws)][-2] == "baseline", out
    grows()
    with use(ws):
        assert run_experiment.main(["--apply", str(tmp_path / "missing.json")]) == 2


def test_tampering_voids_the_run(tmp_path: Path) -> None:
    """Unsandboxed (where no sandbox can be had), a candidate that rewrites the harness, or code
    that goals.json names "frozen" (the VAE's split decode), is caught after the fact: the row is
    `tampered`, nothing is kept, optimize.py is restored. The toy model sleeps 0.05 s a call: no
    verdict here depends on timing (the first run only sets the stage)."""
    ws = make_toy(tmp_path / "toy", copy_harness=True, git=True)
    (ws / "split.py").write_text("# code the adapter would run, frozen by goals.json\n")
    goals = json.loads((ws / "goals.json").read_text()) | {"frozen": ["split.py"]}
    (ws / "goals.json").write_text(json.dumps(goals))
    for cmd in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "split.py frozen"]):
        subprocess.run(["git", *cmd], cwd=ws, check=True)
    rc, f, out = run(ws, "--desc", "first run", "--no-profile", delay=0.05)
    assert rc in (0, 1), out
    before = (ws / "optimize.py").read_text()
    for name, changed in (("rewrites_harness", "harness/cli/bench.py"), ("rewrites_frozen_code", "split.py")):
        cheat = (Path(__file__).parent / "cheaters" / f"{name}.py").read_text()
        (ws / "optimize.py").write_text(cheat.replace("from _target import C, honest", "from harness import _common as C")
                                        .replace("honest(model, x)", "model(x)"))
        rc, f, out = run(ws, "--desc", name, "--unsandboxed", "--no-profile", delay=0.05)
        assert rc == 1 and f["status"] == "tampered" and f"file {changed} changed" in f["reason"], out
        assert f["sandbox"] == "none (--unsandboxed)" and (ws / "optimize.py").read_text() == before
        subprocess.run(["git", "checkout", "-q", "--", "harness", "split.py"], cwd=ws, check=True)  # undo the cheat


def test_code_goals_names_frozen_is_in_the_frozen_hash(tmp_path: Path) -> None:
    """goals.json's "frozen" (the VAE's: the split decode in integrations/) puts code outside the
    adapter's package into every row's frozen hash: changed, the hash changes (a run during which
    it changes is void); missing, or not a list of relative paths, a one-line setup error."""
    from harness import _common as C

    ws = make_toy(tmp_path / "toy")
    goals = json.loads((ws / "goals.json").read_text())
    (ws / "split.py").write_text("ROWS = 2\n")
    with use(ws):
        assert "split.py" not in frozen.frozen_files()
        (ws / "goals.json").write_text(json.dumps(goals | {"frozen": ["split.py"]}))
        named = frozen.frozen_hash()
        assert "split.py" in frozen.frozen_files()
        (ws / "split.py").write_text("ROWS = 3\n")
        assert frozen.frozen_hash() != named
        (ws / "split.py").unlink()
        with pytest.raises(Refused, match="frozen path that does not exist: .*split.py"):
            frozen.frozen_files()
        for bad, why in (("split.py", "must be a list of paths"), (["/etc/passwd"], "must be a list of paths"), ([3], "must be a list"),
                         (["../x"], "a path out of it"), (["."], "the folder itself"), (["./optimize.py"], "the candidate")):
            (ws / "goals.json").write_text(json.dumps(goals | {"frozen": bad}))
            with pytest.raises(Refused, match=f"frozen .*{why}"):
                C.load_goals()
    repo_goals = Path(__file__).resolve().parent.parent / "targets" / "wan-vae" / "goals.json"
    assert "integrations/split_decode.py" in json.loads(repo_goals.read_text())["frozen"]


def test_warmup_tie_reads_the_best_keepers_record(tmp_path: Path) -> None:
    Store(tmp_path / "records").write(Record(exp="e007", status="keep", desc="d", preset="full", facts={"warmup_s": 18.6}))
    goals = {"warmup_gain": 0.15}
    assert K.warmup_tie(goals, {"warmup_s": 15.4}, {"exp": "e007"}, tmp_path / "records") == (15.4, 18.6, 0.15)
    assert K.warmup_tie({}, {"warmup_s": 15.4}, {"exp": "e007"}, tmp_path / "records") is None  # the target asks for no warm-up rule
    assert K.warmup_tie(goals, {"warmup_s": 15.4}, {"exp": "e008"}, tmp_path / "records") is None  # the best has no record here
    assert K.warmup_tie(goals, {}, {"exp": "e007"}, tmp_path / "records") is None
    # A baseline measured earlier in the same run has no record yet: its warm-up travels with it.
    assert K.warmup_tie(goals, {"warmup_s": 15.4}, {"status": "baseline", "warmup_s": 30.0}) == (15.4, 30.0, 0.15)


def test_after_a_warm_up_keep_the_current_keeper_is_the_reference(tmp_path: Path) -> None:
    """Session 8's rows on machines R and S: e047 was kept for its warm-up (15.4 s against e044's
    28.8 s) with a median 0.2% slower, so e044 stays the best and e047 is the code in optimize.py.
    Warm-up ties, reruns and restores must follow e047: judged against e044's 28.8 s, a candidate
    with e044's median and a 24 s warm-up would be kept, bringing back half of the first call e047
    saved; a rerun of e047's code would not be one."""
    row = {c: "x" for c in R.COLUMNS} | {"preset": "full", "gpu": "H100", "spread_s": 0.01, "desc": "d"}
    got = rows_of(*(row | {"exp": exp, "status": status, "median_s": median, "metric": median, "candidate_sha": sha}
                    for exp, status, median, sha in (("e042", "baseline", 9.913, "b"), ("e043", "keep", 2.675, "c1ab"),
                                                     ("e044", "keep", 2.148, "03aa"), ("e045", "revert", 5.631, "6a1d"),
                                                     ("e046", "rerun", 2.143, "03aa"), ("e047", "keep", 2.153, "f00d"))))
    best, current = R.best_row(got, "full", "H100"), R.current_row(got, "full", "H100")
    assert (best["exp"], current["exp"]) == ("e044", "e047")
    assert K.rerun_of("f00d" + "0" * 12, best, current)["exp"] == "e047"
    assert K.rerun_of("03aa" + "0" * 12, best, current)["exp"] == "e044"
    assert K.rerun_of("beef" + "0" * 12, best, current) is None
    # The warm-up clause compares with the current keeper: 24 s is no gain over e047's 15.4 s.
    def rec(beside: dict) -> dict:  # timed beside that keeper, at its row's median
        facts = {"times_s": [2.150] * 6, "median_s": 2.150, "warmup_s": 24.0,
                 "paired": {"keeper_sha": beside["candidate_sha"], "keeper_times_s": [float(beside["median_s"])] * 6}}
        return {"facts": facts, "metric": 2.150, "candidate_sha": "beef" + "0" * 12}

    goals = {"noise_threshold": 0.01, "warmup_gain": 0.15}
    assert K.judge_record(rec(current), goals, best, current | {"warmup_s": 15.4}).status == "revert"
    assert K.judge_record(rec(best), goals, best, best | {"warmup_s": 28.8}).status == "keep"  # what e044's figure would say
    got += rows_of(row | {"exp": "e048", "status": "baseline", "median_s": 9.9, "metric": 9.9, "candidate_sha": "b"})
    assert R.current_row(got, "full", "H100")["exp"] == "e048"  # a new baseline starts over


def test_rows_read_as_numbers(tmp_path: Path) -> None:
    """A row's cells stay the text in the file; its attributes are the numbers they mean."""
    row = add_record(tmp_path, {"exp": "e001", "status": "baseline", "median_s": 2.5, "spread_s": 0.1, "preset": "tiny",
                                "gpu": "g", "desc": "d"})[0]
    assert isinstance(row, R.Row) and row["median_s"] == "2.5" and row.median_s == 2.5 and row.quality is None
    assert row.metric_value == 2.5 == R.metric_value(dict(row))  # a legacy row (no metric): its median
