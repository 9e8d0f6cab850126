"""A keep rule that survives noise (issue 24, item 6), end to end on the toy target.

The machine's speed is TOY_DELAY_S: the toy model sleeps it per call, and these candidates scale
their own sleep by it, so a run with a smaller TOY_DELAY_S is a run in a lucky (fast) moment.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import made_once, make_toy, use
from harness import records as R
from test_run_experiment import run_here

NORMAL = 0.4


def run(ws: Path, *args: str, speed: float = NORMAL) -> tuple[int, dict, str]:
    """run_experiment at the machine speed TOY_DELAY_S=`speed`, in this process (run_here: what is
    tested here is the keep rule; the workers that measure are processes of their own, which read
    TOY_DELAY_S, as always). The command line runs in test_run_experiment.py and test_first_result.py."""
    return run_here(ws, *args, delay=speed)


def scaled(share: float, note: str = "") -> str:
    """A candidate that takes `share` of the frozen model's time, whatever the machine's speed."""
    return (f'"""toy candidate{note}"""\nimport os\n\n\ndef build_decoder(model, example_input):\n'
            f'    model.delay = {share} * float(os.environ["TOY_DELAY_S"])\n\n'
            f'    def forward_fn(x):\n        return model(x)\n\n    return forward_fn, {{"share": {share}}}\n')


def make_first_keeper(folder: Path) -> Path:
    ws = make_toy(folder / "toy", git=True)
    (ws / "optimize.py").write_text(scaled(0.5))
    subprocess.run(["git", "commit", "-qam", "half"], cwd=ws, check=True)
    rc, f, out = run(ws, "--desc", "first run", "--no-profile")
    assert rc == 0 and f["exps"] == ["e001", "e002"] and f["status"] == "keep", out
    return ws


@pytest.fixture(scope="module")
def first_keeper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first run, once for the run (conftest.made_once): the baseline (e001), then optimize.py
    at half the frozen model's time, kept (e002). Never written to: each test works in a copy (first_run)."""
    return made_once(tmp_path_factory, "keep_noise", make_first_keeper)


def first_run(first_keeper: Path, tmp_path: Path) -> Path:
    """A copy of the first run's workspace (its git history, records and results) for one test."""
    assert [r["status"] for r in R.read_rows(first_keeper / "results.tsv")] == ["baseline", "keep"]  # as made
    return shutil.copytree(first_keeper, tmp_path / "toy", symlinks=True)


def test_the_same_code_in_a_lucky_moment_is_not_kept(first_keeper: Path, tmp_path: Path) -> None:
    """The keeper's code again (another comment, so not a re-run), measured while the machine runs
    twice as fast: judged against the keeper's recorded median it looked 2x faster and was kept;
    measured beside the keeper, in the same moment, it is the same speed and is reverted."""
    ws = first_run(first_keeper, tmp_path)
    (ws / "optimize.py").write_text(scaled(0.5, " (the same code, another comment)"))
    rc, f, out = run(ws, "--desc", "same code, lucky moment", "--no-profile", speed=NORMAL / 2)
    assert rc == 0 and f["status"] == "revert", out
    # Either wording says the gain is not beyond the noise: "inside the noise" when the pairs
    # fall on both sides of zero, "not surely beyond the 1% noise threshold" when all six came out
    # faster by chance (one run in 64, seen once).
    assert "inside the noise" in f["verdict"] or "not surely beyond" in f["verdict"], f["verdict"]
    assert "CI" in f["verdict"] and "alternating pairs" in out


def test_a_keeper_with_a_wide_spread_blocks_no_later_keep(first_keeper: Path, tmp_path: Path) -> None:
    """The keeper's timed calls once spread 3.38 s (issue 24's CPU keeper): a later candidate had to
    beat it by more than that, so nothing faster could ever be kept. Now the keeper is timed again
    beside the candidate and its old spread plays no part."""
    ws = first_run(first_keeper, tmp_path)
    tsv = ws / "results.tsv"
    lines = tsv.read_text().splitlines(keepends=True)
    cells = lines[2].split("\t")
    assert cells[0] == "e002" and cells[4] == "keep"
    cells[6] = "3.38"  # spread_s: the noisy moment it was measured in
    tsv.write_text("".join(lines[:2]) + "\t".join(cells) + "".join(lines[3:]))
    rec = ws / "records" / "e002.json"
    rec.write_text(json.dumps(json.loads(rec.read_text()) | {"facts": json.loads(rec.read_text())["facts"] | {"spread_s": 3.38}}))
    subprocess.run(["git", "commit", "-qam", "a noisy keeper"], cwd=ws, check=True)
    (ws / "optimize.py").write_text(scaled(0.2))
    rc, f, out = run(ws, "--desc", "faster", "--no-profile")
    assert rc == 0 and f["status"] == "keep", out
    assert f["verdict"].startswith("kept: faster than e002 by"), f["verdict"]
    assert [r["status"] for r in R.read_rows(ws / "results.tsv")] == ["baseline", "keep", "keep"]


def test_a_keeper_that_slows_down_later_carries_no_candidate(tmp_path: Path) -> None:
    """The keeper is agent code too. This one is honest while it is judged and twice as slow later
    (here "later" is a machine speed other than the one it was kept at; a real one would read the
    clock). Measured beside it, a candidate of the keeper's honest speed looked 2x faster and was
    kept; judged against the keeper's own row, it is not."""
    cheater = Path(__file__).resolve().parent / "cheaters" / "slows_as_keeper.py"
    assert f"KEPT_AT = {NORMAL} " in cheater.read_text()  # it is honest at this test's machine speed
    ws = make_toy(tmp_path / "toy", git=True)
    (ws / "optimize.py").write_text(cheater.read_text())
    subprocess.run(["git", "commit", "-qam", "a keeper with a bomb"], cwd=ws, check=True)
    rc, f, out = run(ws, "--desc", "the keeper, honest for now", "--no-profile")
    assert rc == 0 and f["status"] == "keep", out
    (ws / "optimize.py").write_text(scaled(0.5, " (the keeper's honest speed, no bomb)"))
    rc, f, out = run(ws, "--desc", "no faster than the keeper was", "--no-profile",
                     speed=NORMAL * 1.02)
    assert rc == 0 and f["status"] == "revert", out
    assert "slower beside it than on its own row" in f["verdict"], f["verdict"]


def test_measure_leaves_its_arguments_alone(tmp_path: Path) -> None:
    """measure() once cleared --best-median on the args it was given, after a first run's baseline."""
    from harness import _common, run_experiment

    ws = make_toy(tmp_path / "toy")
    a = argparse.Namespace(desc="x", preset=None, candidate=None, device="cpu", timeout=None, no_profile=True,
                           unsandboxed=False, rebaseline=False, best_median=0.5, measure_only=True, record_out=None,
                           apply=None)
    before = dict(vars(a))
    with use(ws):
        recs = run_experiment.measure(a, _common.load_goals())
    assert vars(a) == before and [r["outcome"] for r in recs] == ["measured", "measured"]
    assert recs[1]["facts"]["paired"]["keeper_times_s"]  # the baseline was timed beside it


FAILS_ON_ITS_THIRD_CALL = ('"""toy candidate: right twice, then it raises"""\n\n\ndef build_decoder(model, example_input):\n'
                           '    calls = []\n\n    def forward_fn(x):\n        calls.append(1)\n'
                           '        if len(calls) == 3:\n            raise RuntimeError("third call")\n'
                           '        return model(x)\n\n    return forward_fn, {}\n')


def test_a_first_runs_baseline_is_timed_in_full_after_its_rival_failed(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 13, the first run on 2 H100s: the candidate hung at its first timed call, its
    worker was left running (spinning on both GPUs) until the session ended, and the baseline's
    row came out of one timed call made beside it (22.6 s against 10.2 s alone). A failed worker
    is now stopped at once, and a first run's baseline gets all its timed calls, alone."""
    from harness import _common, run_experiment
    from harness.session import Session

    ws = make_toy(tmp_path / "toy")
    (ws / "optimize.py").write_text(FAILS_ON_ITS_THIRD_CALL)
    rival_alive_at_keeper_calls = []
    timed_call = Session.timed_call

    def spy(self: Session, facts: dict) -> bool:
        if self.candidate.name == "fp32_eager.py":  # the baseline; its rival is the other session
            rival_alive_at_keeper_calls.append(any(s.worker is not None for s in sessions if s is not self))
        return timed_call(self, facts)

    sessions: list[Session] = []
    init = Session.__init__

    def track(self: Session, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        init(self, *args, **kwargs)
        sessions.append(self)

    monkeypatch.setattr(Session, "timed_call", spy)
    monkeypatch.setattr(Session, "__init__", track)
    a = argparse.Namespace(desc="x", preset=None, candidate=None, device="cpu", timeout=None, no_profile=True,
                           unsandboxed=False, rebaseline=True, best_median=None, measure_only=True, record_out=None,
                           apply=None)
    with use(ws):
        base, cand = run_experiment.measure(a, _common.load_goals())
    assert cand["outcome"] == "crash" and "third call" in cand["reason"], cand["reason"]
    timed = base["facts"]["times_s"]
    assert base["outcome"] == "measured" and len(timed) == base["facts"]["runs"] >= 6, timed
    assert rival_alive_at_keeper_calls[-1] is False, rival_alive_at_keeper_calls  # gone once it failed
    assert rival_alive_at_keeper_calls.count(False) >= len(timed) - 2, rival_alive_at_keeper_calls


def test_the_idle_worker_is_stopped_with_all_it_started(tmp_path: Path) -> None:
    """alternate.py freezes the worker not being timed, its children included (a candidate's helper
    process must not run beside the keeper's calls), and wakes it for its own."""
    import signal
    import time

    from harness import process

    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30; wait"], start_new_session=True)
    try:
        time.sleep(0.3)
        tree = process.descendants(proc.pid)
        assert len(tree) >= 3  # sh and its two sleeps

        def states() -> set[str]:
            return {Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] for p in tree}

        process.signal_tree(proc.pid, signal.SIGSTOP)
        time.sleep(0.2)
        assert states() == {"T"}
        process.signal_tree(proc.pid, signal.SIGCONT)
        time.sleep(0.2)
        assert "T" not in states()
    finally:
        process.signal_tree(proc.pid, signal.SIGKILL)  # this tree only
        proc.wait()
