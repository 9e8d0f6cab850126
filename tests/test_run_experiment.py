"""run_experiment end to end on the toy target (cheap), plus decide() and the record files.

Latency "by construction": the toy candidates sleep, so keep/revert does not hang on CPU noise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HARNESS = REPO / "harness"
TOY = Path(__file__).resolve().parent / "toy_target"
sys.path.insert(0, str(REPO))

from harness import records as R  # noqa: E402
from harness import run_experiment  # noqa: E402
from harness.run_experiment import decide  # noqa: E402

SLOW, MEDIUM, FAST = 0.6, 0.3, 0.0  # seconds of sleep per call: gaps far above CPU noise


def candidate(sleep: float = 0.0, body: str = "return model(x)", build: str = "") -> str:
    return (f'"""toy candidate"""\nimport time\n\n\ndef build_decoder(model, example_input):\n{build}'
            f"    def forward_fn(x):\n        time.sleep({sleep})\n        {body}\n\n"
            f'    return forward_fn, {{"sleep": {sleep}}}\n')


def make_toy(dest: Path, git: bool = True) -> Path:
    """A copy of the toy target with harness/ linked in; a git repo when asked."""
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "harness").symlink_to(HARNESS)
    (dest / ".gitignore").write_text("__pycache__/\nruns/\nassets/\nprofiles/*.json\n")
    (dest / "optimize.py").write_text(candidate(SLOW))
    # The input and its strict-fp32 reference, made by helper scripts in one interpreter start.
    code = ("from harness import make_latent, make_reference; make_latent.run('tiny', mode='seeded', "
            "device='cpu'); make_reference.run('tiny', device='cpu')")
    subprocess.run([sys.executable, "-c", code], cwd=dest, check=True, timeout=120,
                   env={**os.environ, "AUTO_OPTIM_GOALS": str(dest / "goals.json")})
    if git:
        subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
        subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"],
                       cwd=dest, check=True)
    return dest


def run(ws: Path, *args: str) -> tuple[int, dict]:
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}
    p = subprocess.run([sys.executable, str(ws / "harness" / "run_experiment.py"), *args], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p.returncode, (json.loads(lines[-1]) if lines else {"stderr": p.stderr[-2000:]})


def rows(ws: Path) -> list[dict[str, str]]:
    return R.read_rows(ws / "results.tsv")


def tracked(ws: Path) -> str:
    return subprocess.run(["git", "ls-files"], cwd=ws, capture_output=True, text=True).stdout


def git_log(ws: Path) -> str:
    return subprocess.run(["git", "log", "--format=%s"], cwd=ws, capture_output=True, text=True).stdout


def test_decide() -> None:
    assert decide(1.0, 0.01, None, 0.0, 0.01) == "baseline"
    assert decide(0.90, 0.01, 1.0, 0.01, 0.01) == "keep"
    assert decide(0.995, 0.001, 1.0, 0.001, 0.01) == "revert"  # inside the noise threshold
    assert decide(0.95, 0.08, 1.0, 0.01, 0.01) == "revert"  # gain smaller than the candidate's spread
    assert decide(0.95, 0.01, 1.0, 0.08, 0.01) == "revert"  # ... or the best's spread
    assert decide(1.2, 0.0, 1.0, 0.0, 0.01) == "revert"


def test_records_append_only(tmp_path: Path) -> None:
    path = tmp_path / "results.tsv"
    base = {c: "x" for c in R.COLUMNS} | {"exp": "e001", "status": "baseline", "median_s": 1.0,
                                          "preset": "tiny", "spread_s": 0.0, "desc": "a\tb\nc"}
    R.append_row(base, path)
    before = path.read_text()
    R.append_row(base | {"exp": R.next_exp_id(R.read_rows(path)), "status": "keep", "median_s": 0.5}, path)
    after = path.read_text()
    assert after.startswith(before) and len(after.splitlines()) == 3
    got = R.read_rows(path)
    assert [r["exp"] for r in got] == ["e001", "e002"] and got[0]["desc"] == "a b c"
    assert R.best_row(got, "tiny")["exp"] == "e002" and R.baseline_row(got, "tiny")["exp"] == "e001"
    with pytest.raises(ValueError):
        R.append_row(base | {"status": "great"}, path)
    path.write_text(after + "broken line\n")  # a damaged file is refused, not extended
    with pytest.raises(R.C.SetupError):
        R.append_row(base, path)
    prog = tmp_path / "PROGRESS.md"
    R.append_progress("e001 baseline", prog)
    R.append_progress("e002 keep", prog)
    text = prog.read_text()
    assert "## Dead ends" in text and text.endswith("## Log\n\n- e001 baseline\n- e002 keep\n")
    md = R.write_leaderboard(got, tmp_path / "leaderboard.md")
    assert "Generated" in md and md.index("| e002 |") < md.index("| e001 |")


def test_flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One sequence (each run_experiment call costs a few interpreter starts): every status,
    restores, append-only records, commits, leaderboard, measure-only + apply, frozen hash."""
    ws = make_toy(tmp_path / "toy")
    opt = ws / "optimize.py"
    history: list[str] = []

    def grows() -> None:
        text = (ws / "results.tsv").read_text()
        assert not history or text.startswith(history[-1])
        history.append(text)

    rc, f = run(ws, "--desc", "baseline: sleepy eager")
    assert rc == 0 and f["status"] == "baseline", f
    grows()
    assert (ws / "profiles" / "e001.md").is_file() and "e001: " in git_log(ws)
    strip = ws / "quality" / "e001.png"  # the keeper's quality strip, committed with its record
    assert strip.read_bytes().startswith(b"\x89PNG") and "quality/e001.png" in tracked(ws)

    opt.write_text(medium := candidate(MEDIUM))
    rc, f = run(ws, "--desc", "less sleep", "--no-profile")
    assert rc == 0 and f["status"] == "keep", f
    grows()
    assert float(f["speedup_vs_fp32"]) > 1.5 and "e002: " in git_log(ws)
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True).stdout.strip()

    for text, status, extra in [(candidate(SLOW), "revert", []),                      # slower
                                (candidate(FAST, body="return model(x) * 0.5"), "gate_fail", []),
                                (candidate(FAST, body="raise RuntimeError('boom')"), "crash", []),
                                (candidate(FAST, build="    time.sleep(120)\n"), "timeout", ["--timeout", "5"])]:
        opt.write_text(text)
        rc, f = run(ws, "--desc", status, *extra)
        assert rc == 1 and f["status"] == status, f
        assert opt.read_text() == medium, f"{status}: optimize.py not restored byte for byte"
        grows()

    # A file edited while it is measured (here by itself, after verify loaded it): bench runs other
    # code than the source the record would hold, so nothing is recorded.
    opt.write_text(candidate(FAST, build="    open(__file__, 'a').write('# edited during the run\\n')\n"))
    rc, f = run(ws, "--desc", "edits itself", "--no-profile")
    assert rc == 2 and "changed while it was being measured" in f["reason"], f
    assert (ws / "results.tsv").read_text() == history[-1]
    opt.write_text(medium)

    # The GPU machine: a copy without .git, holding the records; its measuring records nothing.
    gpu = tmp_path / "gpu"
    shutil.copytree(ws, gpu, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    (gpu / "optimize.py").write_text(fast := candidate(FAST))
    rc, f = run(gpu, "--desc", "no sleep", "--measure-only", "--record-out", str(gpu / "rec.json"))
    assert rc == 0 and f["would_be"] == "keep", f
    rec = json.loads((gpu / "rec.json").read_text())
    assert rec["source"] == fast and "Profile" in rec["profile_md"] and rec["strip_png"]
    assert (gpu / "results.tsv").read_text() == history[-1]
    monkeypatch.setenv("AUTO_OPTIM_GOALS", str(ws / "goals.json"))  # bookkeeping runs in-process: cheap
    assert run_experiment.main(["--apply", str(gpu / "rec.json")]) == 0
    grows()
    assert opt.read_text() == fast and (ws / "profiles" / "e007.md").is_file() and "e007: " in git_log(ws)
    got = rows(ws)
    assert [r["status"] for r in got] == ["baseline", "keep", "revert", "gate_fail", "crash", "timeout", "keep"]
    assert [r["exp"] for r in got] == [f"e00{i}" for i in range(1, 8)]
    assert got[1]["commit"] != "-" and got[2]["commit"] == "-"
    board = (ws / "leaderboard.md").read_text()
    assert board.index("| e007 |") < board.index("| e002 |") < board.index("| e001 |") and "| e003 |" not in board
    assert (ws / "PROGRESS.md").read_text().count("\n- e00") == 7
    assert (ws / "quality" / "e007.png").is_file() and not (ws / "quality" / "e003.png").exists()

    # The same source measured again (here: the same record): a re-run, not a keeper or a revert.
    head = git_log(ws)
    assert run_experiment.main(["--apply", str(gpu / "rec.json")]) == 0
    grows()
    last = rows(ws)[-1]
    assert (last["exp"], last["status"], last["commit"]) == ("e008", "rerun", "-")
    assert opt.read_text() == fast and git_log(ws) == head
    assert "re-run of e007" in (ws / "PROGRESS.md").read_text().splitlines()[-1]
    assert "within the 1% noise threshold" in (ws / "PROGRESS.md").read_text().splitlines()[-1]

    # A changed frozen file: refused, nothing recorded, until a person re-baselines.
    goals = json.loads((ws / "goals.json").read_text())
    (ws / "goals.json").write_text(json.dumps(goals | {"noise_threshold": 0.02}))
    assert run_experiment.main(["--desc", "after a goals edit", "--no-profile"]) == 2
    assert (ws / "results.tsv").read_text() == history[-1]
    rec["frozen_hash"] = "0123456789abcdef"  # as if measured with the edited goals
    (gpu / "rec.json").write_text(json.dumps(rec))
    assert run_experiment.main(["--apply", str(gpu / "rec.json")]) == 2
    assert (ws / "results.tsv").read_text() == history[-1]
    assert run_experiment.main(["--apply", str(gpu / "rec.json"), "--rebaseline"]) == 0
    grows()
    assert rows(ws)[-1]["status"] == "baseline" and rows(ws)[-1]["frozen_hash"] == "0123456789abcdef"
    assert run_experiment.main(["--apply", str(tmp_path / "missing.json")]) == 2
