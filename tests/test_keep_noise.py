"""A keep rule that survives noise (issues 24 and 43), end to end on the toy target.

The machine's speed is TOY_DELAY_S: the toy model sleeps it per call, and these candidates scale
their own sleep by it, so a run with a smaller TOY_DELAY_S is a run in a lucky (fast) moment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import made_once, made_once_fixture, make_toy, use
from harness.errors import Refused
from harness.ledger import results
from harness.ledger.store import Store
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


@made_once_fixture
def first_keeper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first run, once for the run (conftest.made_once): the baseline (e001), then optimize.py
    at half the frozen model's time, kept (e002). Never written to: each test works in a copy (first_run)."""
    return made_once(tmp_path_factory, "keep_noise", make_first_keeper)


def first_run(first_keeper: Path, tmp_path: Path) -> Path:
    """A copy of the first run's workspace (its git history, records and results) for one test."""
    assert [r["status"] for r in results.read(first_keeper / "results.tsv")] == ["baseline", "keep"]  # as made
    return shutil.copytree(first_keeper, tmp_path / "toy", symlinks=True)


@contextlib.contextmanager
def busy_loops(most: int = 1) -> Iterator[list[float]]:
    """Load started by the test at random moments: busy loops (a Python process spinning on the
    CPU) that start every 0.2-1 s while fewer than `most` run, each for 0.5-2.5 s. Yields the list
    of their lengths, filled as they start."""
    rng = random.Random()  # unseeded: moments the harness cannot know
    started: list[float] = []
    procs: list[subprocess.Popen] = []
    done = threading.Event()

    def load() -> None:
        while not done.wait(rng.uniform(0.2, 1.0)):
            procs[:] = [p for p in procs if p.poll() is None]
            if len(procs) < most:
                started.append(rng.uniform(0.5, 2.5))
                procs.append(subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + "
                                               f"{started[-1]}\nwhile time.monotonic() < end:\n    pass\n"]))

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        yield started
    finally:
        done.set()
        thread.join()
        for p in procs:  # the ones this test started, by their handles
            p.kill()
            p.wait()


def test_verdicts_under_busy_loops(first_keeper: Path, tmp_path: Path) -> None:
    """Issue 43: on a busy machine the same code was reverted "slower by 34.9%" against its keeper's
    recorded figure (the keeper ran 69% slower beside it than on its row), and a noise keep was
    committed. Under busy loops started at random moments: the keeper's code again (another comment,
    so not a re-run) while the machine runs 1.5x slower than when the keeper was kept is
    inconclusive, neither kept nor "slower by X%"; at the keeper's speed a 30% slower candidate is
    reverted and a 30% faster one kept (past a keeper whose row once spread 3.38 s: issue 24's
    block), never the other way round, within three runs where the load leaves one inconclusive.
    The simulated version, thousands of runs: test_keep_rule_noise.py."""
    ws = first_run(first_keeper, tmp_path)
    tsv = ws / "results.tsv"  # the keeper's row: measured in a noisy moment, its calls spread 3.38 s
    keeper = ws / "records" / "e002.json"
    rec = json.loads(keeper.read_text())
    assert rec["exp"] == "e002" and rec["status"] == "keep"
    keeper.write_text(json.dumps(rec | {"facts": rec["facts"] | {"spread_s": 3.38}}))  # committed: trusted as git holds it
    results.write(Store(ws / "records"), tsv)
    assert results.read(tsv)[1]["spread_s"] == "3.38"
    subprocess.run(["git", "commit", "-qam", "a noisy keeper"], cwd=ws, check=True)
    tries: dict[str, list[tuple[str, str]]] = {}
    with busy_loops() as loads:
        for share, speed, desc, right in ((0.5, NORMAL * 1.5, "same code, busier machine", "inconclusive"),
                                          (0.5 * 1.3, NORMAL, "30% slower", "revert"), (0.5 / 1.3, NORMAL, "30% faster", "keep")):
            # Another run where the load left a pair unreadable ("inconclusive: ... run again"), as a
            # person would; never the wrong way round, whichever run it is.
            for _ in range(3 if right != "inconclusive" else 1):
                (ws / "optimize.py").write_text(scaled(share, f" ({desc})"))
                rc, f, out = run(ws, "--desc", desc, "--no-profile", speed=speed)
                assert rc == 0, out
                tries.setdefault(desc, []).append((f["status"], f["verdict"]))
                if f["status"] != "inconclusive":
                    break
    assert len(loads) >= 3, loads  # the load ran
    (same, why), = tries["same code, busier machine"]
    assert same == "inconclusive" and why.startswith("inconclusive: not kept, run again on a quieter machine"), why
    assert "slower beside it than on its own row" in why and "slower than e002 by" not in why, why
    slower, faster = tries["30% slower"], tries["30% faster"]
    assert all(status in ("revert", "inconclusive") for status, _ in slower), slower  # never kept
    assert slower[-1][0] == "revert" and slower[-1][1].startswith("reverted: "), slower
    assert all(status in ("keep", "inconclusive") for status, _ in faster), faster  # never reverted
    assert faster[-1][0] == "keep" and faster[-1][1].startswith("kept: faster than e002 by"), faster
    assert [r["status"] for r in results.read(tsv)][-1] == "keep"


def test_a_keeper_that_slows_down_later_carries_no_candidate(tmp_path: Path) -> None:
    """The keeper is agent code too. This one is honest while it is judged and twice as slow later
    (here "later" is a machine speed other than the one it was kept at; a real one would read the
    clock). Measured beside it, a candidate of the keeper's honest speed looked 2x faster and was
    kept; now the keeper's slowdown against its own row makes the run inconclusive: not kept."""
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
    assert rc == 0 and f["status"] == "inconclusive", out  # not kept, and no figure of its own row
    assert "slower beside it than on its own row" in f["verdict"], f["verdict"]


def test_measure_leaves_its_arguments_alone(tmp_path: Path) -> None:
    """measure() once cleared --best-median on the args it was given, after a first run's baseline."""
    from harness import _common

    from harness.cli import run_experiment
    ws = make_toy(tmp_path / "toy")
    a = argparse.Namespace(desc="x", preset=None, candidate=None, device="cpu", timeout=None, no_profile=True,
                           unsandboxed=False, rebaseline=False, best_median=None, measure_only=True, record_out=None,
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
    from harness import _common
    from harness.cli import run_experiment
    from harness.measure.session import Session

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

    from harness.measure import process

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


def test_a_keeper_is_timed_from_its_commit_when_its_record_lacks_its_source(first_keeper: Path, tmp_path: Path) -> None:
    """Issue 43: a candidate whose keeper's source was nowhere was measured alone and judged against
    the keeper's recorded figure. The keeper's code is now found in its record, else in its commit;
    where neither holds it, the run is refused before measuring, never judged against a figure."""
    from harness import _common

    from harness.cli import keepers, run_experiment
    ws = first_run(first_keeper, tmp_path)
    rec = ws / "records" / "e002.json"
    rec.write_text(json.dumps({k: v for k, v in json.loads(rec.read_text()).items() if k != "source_sha256"}))
    with use(ws):
        rows, goals = results.rows(), _common.load_goals()
        path, folder = keepers.keeper_file(rows[1], goals)
        try:
            assert path.read_text() == (ws / "optimize.py").read_text()  # e002's commit holds it
        finally:
            shutil.rmtree(folder)
        assert keepers.keeper_file(rows[1] | {"commit": "0" * 10}, goals) == (None, None)
        (ws / "optimize.py").write_text(scaled(0.3))
        a = argparse.Namespace(desc="x", preset=None, candidate=None, device="cpu", timeout=None, no_profile=True,
                               unsandboxed=False, rebaseline=False, best_median=None, measure_only=True, record_out=None,
                               apply=None)
        rec.write_text(json.dumps(json.loads(rec.read_text()) | {"commit": "0" * 10}))  # its commit holds it not
        with pytest.raises(Refused, match="e002's source is in neither records/e002.json nor its commit"):
            run_experiment.measure(a, goals)
