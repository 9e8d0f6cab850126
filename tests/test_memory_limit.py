"""The memory clause (harness/measure/memory_limit.py): a preset's memory_gb is checked by the harness
holding the rest of the GPU, never read from the worker's own report. The GPU tests run the
cheater that hides its peak (tests/cheaters/hides_its_memory.py) on the toy target."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from harness.decide import keep_rule
from harness.goals import GoalsError, parse
from conftest import tool
from harness.errors import Refused

REPO = Path(__file__).resolve().parent.parent
CHEATERS = REPO / "tests" / "cheaters"
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the ballast holds GPU memory")


@pytest.mark.parametrize("value", [0, -1, "24", True, float("nan"), float("inf")])
def test_a_presets_memory_gb_is_a_positive_number(value) -> None:
    with pytest.raises(GoalsError, match="memory_gb"):
        parse({"presets": {"full": {"memory_gb": value}}}, Path("goals.json"))
    assert parse({"presets": {"full": {"memory_gb": 24}}}, Path("goals.json")).presets["full"].memory_gb == 24.0
    assert parse({"presets": {"full": {}}}, Path("goals.json")).presets["full"].memory_gb is None


def _judge(memory_check: dict | None, memory_gb: float | None = 20.0) -> keep_rule.Verdict:
    """A candidate twice as fast as its keeper in every pair: a keep on speed alone."""
    facts = {"times_s": [1.0] * 6, "median_s": 1.0,
             "paired": {"keeper_sha": "ab12", "keeper_times_s": [2.0] * 6}}
    if memory_check is not None:
        facts["memory_check"] = memory_check
    return keep_rule.judge(facts, 1.0, 0.01, "lower", keep_rule.Keeper("e001", "ab12", 2.0), memory_gb=memory_gb)


def test_a_candidate_that_does_not_fit_is_never_kept() -> None:
    assert _judge(None, memory_gb=None).status == "keep"
    assert _judge({"gb": 20.0, "passed": True, "reason": ""}).status == "keep"
    v = _judge({"gb": 20.0, "passed": False, "reason": "crash: CUDA out of memory"})
    assert v.status == "revert", v
    assert "20 GB" in v.reason and "out of memory" in v.reason and "faster than e001" in v.reason, v.reason
    assert "kept" not in v.reason, v.reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the limit applies")
def test_a_memory_limit_needs_a_gpu(at_toy: Path) -> None:
    r = subprocess.run([*tool("harness.cli.verify", at_toy), "--memory-gb", "4"], cwd=at_toy,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "needs a GPU" in r.stderr


@gpu
def test_the_ballast_leaves_what_it_says(at_toy: Path) -> None:
    from harness.measure.ballast import GB, SLACK_BYTES, Ballast

    with Ballast(1, 3.0):
        free, _ = torch.cuda.mem_get_info(0)
        assert abs(free - 3.0 * GB) <= SLACK_BYTES
    assert torch.cuda.mem_get_info(0)[0] > 10 * GB  # given back


@gpu
def test_a_hidden_peak_does_not_fit(at_toy: Path) -> None:
    """The worker's own figure believes the cheater (under 1 GB for a 6 GB call); the harness's
    ballast does not."""
    from harness.measure import memory_limit
    from harness.measure.session import Session

    with Session(CHEATERS / "hides_its_memory.py", "tiny", "cuda") as s:
        f = s.measure()
    assert f["passed"] and f["peak_mem_gb"] < 1.0, f  # the lie works on the self-report
    fits = memory_limit.check(CHEATERS / "hides_its_memory.py", "tiny", 4.0)
    assert not fits.passed and "out of memory" in fits.reason.lower(), fits
    honest = memory_limit.check(at_toy / "optimize.py", "tiny", 4.0)
    assert honest.passed, honest


def test_the_clause_is_required_where_it_applies() -> None:
    """judge_record is the one place: a GPU record at a preset with memory_gb needs a passing check
    at that N; a CPU record, or a preset without the clause, needs none."""
    from harness.goals import parse

    goals = parse({"presets": {"full": {"memory_gb": 24}, "tiny": {}}}, Path("goals.json"))
    facts = {"times_s": [1.0] * 6, "median_s": 1.0, "paired": {"keeper_sha": "ab12", "keeper_times_s": [2.0] * 6}}
    keeper = {"exp": "e001", "status": "keep", "candidate_sha": "ab12", "metric": 2.0}

    def status(preset: str, device: str, fit: dict | None = None) -> keep_rule.Verdict:
        rec = {"preset": preset, "device": device, "metric": 1.0, "candidate_sha": "cd34",
               "facts": {**facts, **({"memory_check": fit} if fit else {})}}
        return keep_rule.judge_record(rec, goals, keeper, keeper)

    assert status("full", "cuda", {"gb": 24.0, "passed": True, "reason": ""}).status == "keep"
    assert status("full", "cpu").status == "keep" and status("tiny", "cuda").status == "keep"
    unchecked = status("full", "cuda")
    assert unchecked.status == "revert" and "no check" in unchecked.reason, unchecked
    other_n = status("full", "cuda", {"gb": 40.0, "passed": True, "reason": ""})
    assert other_n.status == "revert" and "no check of the preset's 24 GB" in other_n.reason, other_n


def test_apply_accepts_a_passing_check() -> None:
    from harness.ledger.record import check_measured

    rec = {"desc": "x", "preset": "full", "device": "cuda", "outcome": "measured", "frozen_hash": "ab12" * 4,
           "timestamp": "t", "metric": 1.0, "metric_spread": 0.1, "source": "", "candidate_sha": "cd34" * 4,
           "facts": {"median_s": 1.0, "memory_check": {"gb": 24.0, "passed": True, "reason": ""}}}
    check_measured(rec, {"presets": {"full": {}}})


class _ScriptedNVML:
    """nvmlDeviceGetComputeRunningProcesses_v3 asked for a count only: `contexts` processes."""

    def __init__(self, contexts: int) -> None:
        self.contexts = contexts

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count, infos) -> int:  # noqa: N802 (NVML's name)
        count._obj.value = self.contexts
        return 7 if self.contexts else 0  # NVML_ERROR_INSUFFICIENT_SIZE: there are some


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):
    """A GPU with 80 GB free (torch.cuda scripted), and NVML counting `contexts` on it."""
    from harness.measure import ballast, nvml

    allocated: list[int] = []
    real_empty = torch.empty
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (80_000_000_000 - sum(allocated), 80_000_000_000))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(ballast, "ALONE_WAIT_S", 0.0)
    monkeypatch.setattr(ballast.time, "sleep", lambda s: None)

    def fake_empty(n, dtype, device):
        allocated.append(n)
        return real_empty(0)

    def with_contexts(contexts: int, empty=fake_empty):
        monkeypatch.setattr(nvml, "handle", lambda i: (_ScriptedNVML(contexts), i))
        monkeypatch.setattr(ballast.torch, "empty", empty)
        return allocated

    return with_contexts


def test_the_ballast_needs_the_gpu_to_itself(fake_gpu) -> None:
    """What another process holds could be freed into the worker's share after the ballast."""
    from harness.measure.ballast import Ballast, NotEnoughMemory

    fake_gpu(2)  # this process and one more
    with pytest.raises(NotEnoughMemory, match="1 other process"):
        Ballast(1, 24.0).take()
    allocated = fake_gpu(1)
    with Ballast(1, 24.0) as b:
        assert allocated == [56_000_000_000] and len(b.held) == 1
    assert b.held == []


def test_a_ballast_that_cannot_be_taken_is_a_refusal(fake_gpu) -> None:
    """The machine's failure, never the candidate's: a Refused (run_experiment: refused, no row)."""

    from harness.measure.ballast import Ballast

    def oom(n, dtype, device):
        raise torch.OutOfMemoryError("taken meanwhile")

    fake_gpu(1, empty=oom)
    with pytest.raises(Refused, match="fell while the ballast was taken"):
        Ballast(1, 24.0).take()
    fake_gpu(1)
    with pytest.raises(Refused, match="less than the 90 GB"):
        Ballast(1, 90.0).take()


def test_no_limit_where_this_process_makes_the_references(at_toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM target computes each call's reference here: under a ballast that would take from
    the worker's N GB (or run this process out of memory and blame the candidate)."""
    from harness.measure.session import Session
    from harness.target import assets

    monkeypatch.setattr(assets, "reference_follows_output", lambda adapter: True)
    with pytest.raises(Refused, match="references made beforehand"):
        Session(None, "tiny", "cpu", memory_gb=4.0)


def test_a_worker_that_lets_go_during_the_wait_is_not_a_refusal(fake_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """The previous worker's context goes while the ballast waits to be alone, and the memory it
    held comes free with it: the ballast is sized from the free memory after the wait."""
    from harness.measure import ballast, nvml
    from harness.measure.ballast import Ballast

    allocated = fake_gpu(1)
    monkeypatch.setattr(ballast, "ALONE_WAIT_S", 5.0)  # time to count again (sleep is a no-op here)
    scripted, departed = _ScriptedNVML(2), 5_000_000_000  # a worker of 5 GB still there at the first count

    def count(handle, n, infos):
        rc = _ScriptedNVML.nvmlDeviceGetComputeRunningProcesses_v3(scripted, handle, n, infos)
        scripted.contexts = 1  # gone by the next count
        return rc

    scripted.nvmlDeviceGetComputeRunningProcesses_v3 = count
    monkeypatch.setattr(nvml, "handle", lambda i: (scripted, i))
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda i: (80_000_000_000 - sum(allocated) - (departed if scripted.contexts > 1 else 0), 80_000_000_000))
    with Ballast(1, 24.0):
        assert allocated == [56_000_000_000]


@pytest.mark.parametrize("value", [0, -2, "8", True, float("nan"), float("inf")])
def test_worker_memory_gb_is_a_positive_number(value) -> None:
    """goals.json "worker_memory_gb": the host memory a worker's cgroup may hold (harness/sandbox/cgroup.py)."""
    with pytest.raises(GoalsError, match="worker_memory_gb"):
        parse({"worker_memory_gb": value}, Path("goals.json"))
    assert parse({"worker_memory_gb": 12}, Path("goals.json")).worker_memory_gb == 12.0
    assert parse({}, Path("goals.json")).worker_memory_gb is None
