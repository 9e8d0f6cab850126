"""harness/measure/busy.py's wait before each timed call (harness/measure/alternate.py, measuring.py), with NVML scripted:
the GPUs here are a table of utilisation readings over time, so the waits run on a CPU."""

from __future__ import annotations

import ctypes
import time

import pytest

from harness.measure import busy, nvml


class ScriptedNVML:
    """nvmlDeviceGetUtilizationRates for GPUs whose handle is their index: GPU i reads 100% until
    busy_until[i] seconds after the script starts, then 0%."""

    def __init__(self, busy_until: list[float]) -> None:
        self.busy_until, self.start = busy_until, time.perf_counter()

    def nvmlDeviceGetUtilizationRates(self, handle: int, util) -> int:  # noqa: N802 (NVML's name)
        util._obj.gpu = 100 if time.perf_counter() - self.start < self.busy_until[handle] else 0
        return 0


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    """Install a scripted NVML; returns a function that sets each GPU's busy time."""

    def script(*busy_until: float) -> None:
        scripted = ScriptedNVML(list(busy_until))
        monkeypatch.setattr(nvml, "handle", lambda i: (scripted, i) if i < len(busy_until) else None)
    return script


def waited(gpus: int, limit_s: float = 5.0) -> tuple[bool, float]:
    t0 = time.perf_counter()
    return busy.wait_idle("cuda", limit_s, gpus), time.perf_counter() - t0


def test_a_worker_groups_second_gpu_left_busy_holds_the_next_call(gpus) -> None:
    """A 2-rank candidate whose rank 1 leaves work on GPU 1 after "done": the rival's next call
    waits for it, though GPU 0 is idle (before session 13 only GPU 0 was read)."""
    gpus(0.0, 0.6)
    idle, seconds = waited(2)
    assert idle and seconds >= 0.55, seconds  # GPU 1's 0.6 s began a moment before the wait
    gpus(0.0, 0.6)
    idle, seconds = waited(1)  # one GPU's worker: GPU 0 alone is its business
    assert idle and seconds < 0.6, seconds


def test_a_gpu_that_stays_busy_is_reported(gpus) -> None:
    gpus(0.0, 60.0)
    idle, seconds = waited(2, limit_s=0.5)
    assert not idle and 0.5 <= seconds < 2, seconds


def test_no_nvml_or_no_gpu_waits_for_nothing(gpus) -> None:
    gpus()  # NVML answers for no GPU
    assert waited(2) == (True, pytest.approx(0, abs=0.1))
    assert busy.wait_idle("cpu", 5, 2)


def test_the_fake_reading_is_what_nvml_reads() -> None:
    """The scripted reading goes where NVML's would: into the structure passed by reference."""
    util = busy._Utilization()
    ScriptedNVML([1.0]).nvmlDeviceGetUtilizationRates(0, ctypes.byref(util))
    assert util.gpu == 100
