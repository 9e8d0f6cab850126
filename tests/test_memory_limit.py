"""The memory clause (harness/memory_limit.py): a preset's memory_gb is checked by the harness
holding the rest of the GPU, never read from the worker's own report. The GPU tests run the
cheater that hides its peak (tests/cheaters/hides_its_memory.py) on the toy target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import keep_rule
from harness.goals import GoalsError, parse

REPO = Path(__file__).resolve().parent.parent
CHEATERS = REPO / "tests" / "cheaters"
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the ballast holds GPU memory")


@pytest.mark.parametrize("value", [0, -1, "24", True, float("nan"), float("inf")])
def test_a_presets_memory_gb_is_a_positive_number(value) -> None:
    with pytest.raises(GoalsError, match="memory_gb"):
        parse({"presets": {"full": {"memory_gb": value}}}, Path("goals.json"))
    assert parse({"presets": {"full": {"memory_gb": 24}}}, Path("goals.json")).presets["full"].memory_gb == 24.0
    assert parse({"presets": {"full": {}}}, Path("goals.json")).presets["full"].memory_gb is None


def _judge(memory_check: dict | None) -> keep_rule.Verdict:
    """A candidate twice as fast as its keeper in every pair: a keep on speed alone."""
    facts = {"times_s": [1.0] * 6, "median_s": 1.0,
             "paired": {"keeper_sha": "ab12", "keeper_times_s": [2.0] * 6}}
    if memory_check is not None:
        facts["memory_check"] = memory_check
    return keep_rule.judge(facts, 1.0, 0.01, "lower", keep_rule.Keeper("e001", "ab12", 2.0))


def test_a_candidate_that_does_not_fit_is_never_kept() -> None:
    assert _judge(None).status == "keep"
    assert _judge({"gb": 20.0, "passed": True, "reason": ""}).status == "keep"
    v = _judge({"gb": 20.0, "passed": False, "reason": "crash: CUDA out of memory"})
    assert v.status == "revert", v
    assert "20 GB" in v.reason and "out of memory" in v.reason and "faster than e001" in v.reason, v.reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the limit applies")
def test_a_memory_limit_needs_a_gpu(at_toy: Path) -> None:
    r = subprocess.run([sys.executable, "harness/verify.py", "--memory-gb", "4"], cwd=at_toy,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "needs a GPU" in r.stderr


@gpu
def test_the_ballast_leaves_what_it_says(at_toy: Path) -> None:
    from harness.memory_limit import GB, SLACK_BYTES, Ballast

    with Ballast(1, 3.0):
        free, _ = torch.cuda.mem_get_info(0)
        assert abs(free - 3.0 * GB) <= SLACK_BYTES
    assert torch.cuda.mem_get_info(0)[0] > 10 * GB  # given back


@gpu
def test_a_hidden_peak_does_not_fit(at_toy: Path) -> None:
    """The worker's own figure believes the cheater (under 1 GB for a 6 GB call); the harness's
    ballast does not."""
    from harness import memory_limit
    from harness.session import Session

    with Session(CHEATERS / "hides_its_memory.py", "tiny", "cuda") as s:
        f = s.measure()
    assert f["passed"] and f["peak_mem_gb"] < 1.0, f  # the lie works on the self-report
    fits = memory_limit.check(CHEATERS / "hides_its_memory.py", "tiny", 4.0)
    assert not fits.passed and "out of memory" in fits.reason.lower(), fits
    honest = memory_limit.check(at_toy / "optimize.py", "tiny", 4.0)
    assert honest.passed, honest
