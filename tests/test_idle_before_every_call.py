"""Every timed call starts after its GPUs read idle (harness/measure/busy.py, "Why every call waits"):
in a pair (harness/measure/alternate.py) after its rival's call and after its own, and in a worker
measured alone (Measuring.measure). Until session 30 a pair waited only between the two members'
calls, and a member's second call in a row ran 3% slower on 2 power-capped H200s. Fakes stand in
for the workers and NVML, so this runs on a CPU; the waits' own behaviour is tests/test_busy.py's."""

from __future__ import annotations

from typing import Any

import pytest

from harness.measure import alternate, busy
from harness.measure.measuring import Measuring


class Log(list):
    """What happened, in order: ("idle", gpus) for each wait, ("call", name) for each timed call."""


class FakeSession:
    """The part of a Session that measure_pair drives: begin, timed calls, finish, freeze and thaw."""

    device, ranks, timeouts = "cuda", 2, {"call_s": 1.0}

    def __init__(self, name: str, log: Log) -> None:
        self.name, self.log = name, log

    def begin(self, want_frame: bool = False, calls: int | None = None, runs: int | None = None) -> dict[str, Any]:
        return {"status": "measured", "times_s": [], "left": runs or 6}

    def timed_call(self, facts: dict[str, Any]) -> bool:
        if facts["status"] != "measured" or not facts["left"]:
            return False
        facts["left"] -= 1
        facts["times_s"].append(1.0)
        self.log.append(("call", self.name))
        return True

    def finish(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {**facts, "passed": facts["status"] == "measured", "candidate_sha": self.name * 16,
                "warmup_s": 1.0, "median_s": 1.0}

    def fail(self, facts: dict[str, Any], status: str, reason: str) -> None:
        facts.update(status=status, reason=reason)

    frozen = False

    def pause(self) -> None:
        self.frozen = True

    def resume(self) -> None:
        self.frozen = False


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Log:
    """Record each idle wait in the log (it reads idle at once) and silence the phase lines."""
    events = Log()

    def wait_idle(device: str, limit_s: float, gpus: int = 1) -> bool:
        events.append(("idle", gpus))
        return True

    monkeypatch.setattr(busy, "wait_idle", wait_idle)
    monkeypatch.setattr(alternate, "phase", lambda line: None)
    return events


def calls_without_a_wait(events: Log) -> list[int]:
    """The positions of timed calls not preceded by an idle wait since the call before them."""
    return [i for i, e in enumerate(events) if e[0] == "call" and (i == 0 or events[i - 1][0] != "idle")]


def test_a_pair_waits_before_every_call_its_own_second_in_a_row_too(log: Log) -> None:
    keeper, candidate = FakeSession("k", log), FakeSession("c", log)
    for _ in range(20):  # balanced() draws the order: some draws put one member's calls back to back
        log.clear()
        alternate.measure_pair(keeper, candidate, 6)
        calls = [e[1] for e in log if e[0] == "call"]
        assert len(calls) == 12 and calls_without_a_wait(log) == [], log
        assert all(e == ("idle", 2) for e in log if e[0] == "idle")  # both ranks' GPUs read
    assert any(a == b for a, b in zip(calls, calls[1:]))  # the last draw had a member twice in a row


def test_a_member_whose_own_work_outlasts_its_call_fails_itself_not_its_rival(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work a member leaves running after its call, found by the wait before its own next call: the
    wait blames the member that called last, which is that member itself."""
    log = Log()
    keeper, candidate = FakeSession("k", log), FakeSession("c", log)

    def wait_idle(device: str, limit_s: float, gpus: int = 1) -> bool:
        calls = [e[1] for e in log if e[0] == "call"]
        busy_now = calls[-1:] == ["c"] and ("busy", "c") not in log  # once, after the candidate's first call
        log.append(("busy", "c") if busy_now else ("idle", gpus))
        return not busy_now

    monkeypatch.setattr(busy, "wait_idle", wait_idle)
    monkeypatch.setattr(alternate, "phase", lambda line: None)
    monkeypatch.setattr(alternate, "balanced", lambda pairs: [True, False] + [True] * (pairs - 2))  # k, c, c, k, ...
    kf, cf = alternate.measure_pair(keeper, candidate, 6)
    assert [e for e in log if e[0] != "idle"] == [("call", "k"), ("call", "c"), ("busy", "c")]  # c's own next call
    assert cf["status"] == "gate_fail" and "still busy" in cf["reason"] and cf["times_s"] == [1.0]
    assert kf["status"] == "measured" and "paired" not in cf  # the keeper is not blamed; nothing is compared


def test_both_workers_are_frozen_while_the_gpus_are_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member woken before the wait could start GPU work during it and have its rival blamed for
    the busy GPU (found by a second reader in session 30); frozen, it cannot."""
    log = Log()
    keeper, candidate = FakeSession("k", log), FakeSession("c", log)

    def wait_idle(device: str, limit_s: float, gpus: int = 1) -> bool:
        log.append(("idle", (keeper.frozen, candidate.frozen)))
        return True

    monkeypatch.setattr(busy, "wait_idle", wait_idle)
    monkeypatch.setattr(alternate, "phase", lambda line: None)
    alternate.measure_pair(keeper, candidate, 6)
    waits = [e[1] for e in log if e[0] == "idle"]
    assert len(waits) == 12 and all(w == (True, True) for w in waits), waits
    assert not keeper.frozen and not candidate.frozen  # both woken at the end, to hear "exit"


class Alone(Measuring):
    """A worker measured alone: Measuring.measure's own loop, over fake calls."""

    device, timeouts = "cuda", {"call_s": 1.0}

    def __init__(self, log: Log, ranks: int = 2) -> None:
        self.log, self.ranks, self._todo = log, ranks, []

    def begin(self, want_frame: bool = False, calls: int | None = None) -> dict[str, Any]:
        self._todo = list(range(6))
        return {"status": "measured", "times_s": []}

    def timed_call(self, facts: dict[str, Any]) -> bool:  # as Measuring.timed_call: False once none is left
        if facts["status"] != "measured" or not self._todo:
            return False
        self._todo.pop()
        facts["times_s"].append(1.0)
        self.log.append(("call", "alone"))
        return True

    def finish(self, facts: dict[str, Any]) -> dict[str, Any]:
        return facts

    fail = FakeSession.fail


def test_a_worker_measured_alone_waits_before_every_timed_call(log: Log) -> None:
    facts = Alone(log).measure()
    assert facts["times_s"] == [1.0] * 6 and calls_without_a_wait(log) == [] and len(log) == 12, log


def test_a_worker_whose_own_work_keeps_its_gpu_busy_fails_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alone, the work left running after 'done' is its own: the wait times out and it fails."""
    monkeypatch.setattr(busy, "wait_idle", lambda device, limit_s, gpus=1: False)
    facts = Alone(Log(), ranks=1).measure()
    assert facts["status"] == "gate_fail" and "still busy" in facts["reason"] and facts["times_s"] == []
