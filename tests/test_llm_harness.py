"""The second target end to end through the harness's own commands, on a CPU: a copy of
targets/llm-decode on its tiny adapter (llm.target_tiny) gets its assets, its reference and pool,
a verify, a bench and run_experiment's first run (the frozen fp32 eager baseline, then the shipped
optimize.py), a revert, and a gate failure. Nothing in harness/ is told it is an LLM.

No CPU keeper here: the keepers of this target (bf16, a static KV cache, CUDA graphs, compile)
are GPU techniques that are slower on a CPU; the keep path is proven on the toy target
(test_run_experiment.py) and the H100 rows in targets/llm-decode/results.tsv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "targets" / "llm-decode"
SLOWER = '''"""the shipped optimize.py, 50 ms slower a call: a revert by construction"""
import time

from optimize_shipped import build_decoder as _shipped


def build_decoder(model, example_input):
    fn, info = _shipped(model, example_input)

    def forward(x):
        time.sleep(0.05)
        return fn(x)

    return forward, info
'''
WRONG = '''"""the logits of another position: fails the gate"""
import torch

from optimize_shipped import build_decoder as _shipped


def build_decoder(model, example_input):
    fn, info = _shipped(model, example_input)
    return (lambda x: torch.roll(fn(x), 1, dims=1)), info
'''


def cli(ws: Path, *args: str) -> tuple[int, dict, str]:
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}
    p = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p.returncode, (json.loads(last[-1]) if last else {}), p.stdout[-3000:] + p.stderr[-3000:]


def test_llm_target_through_the_harness(tmp_path: Path) -> None:
    ws = tmp_path / "llm-decode"
    shutil.copytree(TARGET, ws, ignore=shutil.ignore_patterns("__pycache__", "assets", "results.tsv",
                                                            "leaderboard.md", "records", "profiles", "*.png"))
    goals = json.loads((ws / "goals.json").read_text())
    (ws / "goals.json").write_text(json.dumps(goals | {"adapter": "llm.target_tiny"}, indent=1))
    shutil.copy2(ws / "optimize.py", ws / "optimize_shipped.py")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=ws, check=True)

    rc, f, out = cli(ws, "harness/prepare.py", "--seeded")
    assert rc == 0 and len(list((ws / "assets" / "pool_tiny").glob("*.pt"))) == goals["pool"]["size"], out
    rc, f, out = cli(ws, "harness/verify.py")
    assert rc == 0 and f["passed"] and f["quality_name"] == "max KL (nats)", out
    rc, f, out = cli(ws, "harness/bench.py")
    assert rc == 0 and len(f["checked"]) == 6 and f["sandbox"].startswith("landlock"), out

    rc, f, out = cli(ws, "harness/run_experiment.py", "--desc", "first run", "--no-profile")
    rows = (ws / "results.tsv").read_text().splitlines()[1:]
    assert rc in (0, 1) and len(rows) == 2 and rows[0].split("\t")[4] == "baseline", out
    assert "tok/s" in out  # the metric is a throughput, higher is better (goals.json "metric")
    base_rate = float(rows[0].split("\t")[-1])
    assert base_rate == pytest.approx(goals["presets"]["tiny"]["work_per_call"] / float(rows[0].split("\t")[5]), rel=1e-4)

    before = (ws / "optimize.py").read_text()
    for text, status in ((SLOWER, "revert"), (WRONG, "gate_fail")):
        (ws / "optimize.py").write_text(text)
        rc, f, out = cli(ws, "harness/run_experiment.py", "--desc", status, "--no-profile")
        assert rc == 1 and f["status"] == status, out
        assert (ws / "optimize.py").read_text() == before  # put back to the best keeper
    assert "max KL" in (ws / "leaderboard.md").read_text()
