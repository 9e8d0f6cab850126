"""The second target end to end through the harness's own commands, on a CPU: a copy of
targets/llm-decode on its tiny adapter (llm.target_tiny) gets its assets (the input, its
reference, a pool of inputs without references), a verify that fails the old teacher-forcing
loophole, run_experiment's first run (the frozen fp32 eager baseline, then a CPU keeper), and a
revert. Nothing in harness/ is told it is an LLM: the adapter's
reference_for_output makes the session check every call along the call's own greedy path.

The keeper is plans/fp32_lean.py: the same fp32 greedy decode, one forward step per token
through a preallocated KV cache, as a lean loop over the weights (2-3x the baseline's rate at
equal threads on a 2-core CPU, more where a second thread only adds contention).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import tool

# Skipped without transformers; not imported here: the xdist worker that collects this module
# without running it would import it for nothing (~0.6 CPU s).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "targets" / "llm-decode"
SLOWER = '''"""the lean keeper, 50 ms slower a call: a revert by construction"""
import time

from lean_keeper import build_decoder as _lean


def build_decoder(model, example_input):
    fn, info = _lean(model, example_input)

    def forward(x):
        time.sleep(0.05)
        return fn(x)

    return forward, info
'''


def start(ws: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}
    return subprocess.Popen([*tool(args[0]), *args[1:]], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(p: subprocess.Popen) -> tuple[int, dict, str]:
    stdout, stderr = p.communicate(timeout=600)
    last = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    return p.returncode, (json.loads(last[-1]) if last else {}), stdout[-8000:] + stderr[-3000:]  # the summary with its key lines


def cli(ws: Path, *args: str) -> tuple[int, dict, str]:
    return finish(start(ws, *args))


@pytest.mark.big  # two harness processes at once at the end, each with its worker, beside pytest
def test_llm_target_through_the_harness(tmp_path: Path) -> None:
    import torch

    ws = tmp_path / "llm-decode"
    shutil.copytree(TARGET, ws, ignore=shutil.ignore_patterns("__pycache__", "assets", "results.tsv",
                                                            "leaderboard.md", "records", "profiles", "*.png"))
    goals = json.loads((ws / "goals.json").read_text())
    # 96 tokens a call: the keeper's calls (~45 ms) stay well above a shared CPU's scheduling
    # jitter, which at 32 tokens (~15 ms) made its pairs spread wider than its gain beside a busy
    # test three times in a row (session 21's suite), and at the shipped 8 tokens (~4 ms) more often.
    goals["presets"]["tiny"].update(input_shape=[1, 1, 96], work_per_call=96)
    (ws / "goals.json").write_text(json.dumps(goals | {"adapter": "llm.target_tiny"}, indent=1))
    shutil.copy2(ws / "plans" / "fp32_lean.py", ws / "lean_keeper.py")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=ws, check=True)

    rc, f, out = cli(ws, "harness.cli.prepare")  # as the README says, no --seeded: not a video, so seeded
    pool = sorted((ws / "assets" / "pool_tiny").glob("*.pt"))
    assert rc == 0 and len(pool) == goals["pool"]["size"] and (ws / "assets" / "reference_tiny.pt").is_file(), out
    assert all("output" not in torch.load(p, weights_only=True) for p in pool)  # inputs only: nothing to leak

    # The keeper is 2-3x the baseline's rate on a quiet CPU; on a shared one the load can change
    # between the baseline's session and the keeper's by as much, so a revert gets another
    # comparison (up to five), each a new baseline measured right before the keeper.
    for attempt in range(5):
        rc, f, out = cli(ws, "harness.cli.run_experiment", "--candidate", str(ws / "plans" / "fp32_lean.py"),
                         "--desc", "lean fp32 loop", "--no-profile", *(["--rebaseline"] if attempt else []))
        if f.get("status") == "keep":
            break
    rows = [r.split("\t") for r in (ws / "results.tsv").read_text().splitlines()[1:]]
    assert rc == 0 and [r[4] for r in rows[-2:]] == ["baseline", "keep"], out
    assert "tok/s" in out  # the metric is a throughput, higher is better (goals.json "metric")
    base_rate = float(rows[-2][-1])
    assert base_rate == pytest.approx(goals["presets"]["tiny"]["work_per_call"] / float(rows[-2][5]), rel=1e-4)
    assert (ws / "optimize.py").read_text() == (ws / "lean_keeper.py").read_text()  # the keeper is in place

    # The rest needs no clean timing: a revert 50 ms a call slower than the keeper, and the old
    # loophole failing the gate, at once (they share no lock or file). bench.py, whose code knows
    # no target, runs in test_bench_profile.py.
    before = (ws / "optimize.py").read_text()
    (ws / "optimize.py").write_text(SLOWER)
    revert = start(ws, "harness.cli.run_experiment", "--desc", "slower", "--no-profile")
    # the old loophole: all N positions from one forward over the prompt and guessed tokens
    cheat = start(ws, "harness.cli.verify", "--candidate", str(ws / "calibration" / "parallel_prefill.py"))

    rc, f, out = finish(cheat)
    assert rc == 1 and not f["passed"] and f["status"] == "gate_fail" and "max KL" in f["reason"], out
    rc, f, out = finish(revert)
    assert rc == 0 and f["status"] in ("revert", "inconclusive"), out  # measured, recorded, not kept: 0
    assert (ws / "optimize.py").read_text() == before  # put back to the best keeper
    assert "max KL" in (ws / "leaderboard.md").read_text()
