"""How busy the GPU is while the candidate computes, measured from the harness's side.

The stop rule asks whether the device is busy through a whole call. A profile taken inside the
worker cannot answer that honestly: the worker is the candidate, and a candidate can forge its own
profile. So the harness samples NVML's GPU utilisation (the share of the driver's last sample
period in which a kernel ran: no process can write the figure, though any can keep a kernel
running to raise it) on a thread while the timed calls run (harness/measure/nvml.py), and keeps the
readings whose whole period lies inside a call.
On a CPU, or where NVML does not answer, there is no figure (None), and the stop rule says so.

Why every call waits (wait_idle, before each timed call: harness/measure/alternate.py, and
Measuring.rested for a worker alone). A GPU held at its power cap runs a call faster after an idle
moment than straight after another call. Measured on 2 H200s (session 30, the 2-GPU split at its
700 W cap; targets/wan-vae/profiles/power_idle_h200x2_s30.md): while the harness waited for idle
only between the two members' calls, each call that came straight after its own member's previous
call ran 20-30 ms (3%) longer on the GPU of both ranks, and no call after the wait did; a worker
measured alone, with no wait at all, ran every call the longer way. One such call in a pair widened
the keep rule's interval past any 2-3% gain. So every timed call now starts from the same state:
its GPUs idle over a whole sample period.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time

from harness.measure import nvml

INTERVAL_S = 0.02   # how often the thread reads the counter
PERIOD_S = 0.2      # NVML averages over its last sample period (1/6 s to 1 s): a reading taken this
                    # long after a call started covers none of the gap before it


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class BusySampler:
    """Reads the GPU's utilisation on a thread; `mark()` names the calls the figure is about.

        with BusySampler(device) as busy:
            ...                            # a timed call, from t0 to t1 (time.perf_counter)
            busy.mark(t0, t1)
        busy.fraction()                    # mean utilisation inside the calls, 0..1, or None
    """

    def __init__(self, device: str) -> None:
        import torch

        self._nvml = nvml.handle(torch.cuda.current_device()) if device == "cuda" else None
        self._readings: list[tuple[float, int]] = []
        self._calls: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "BusySampler":
        if self._nvml is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)

    def _sample(self) -> None:
        lib, handle = self._nvml
        util = _Utilization()
        while not self._stop.wait(INTERVAL_S):
            if lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) == 0:
                self._readings.append((time.perf_counter(), util.gpu))

    def mark(self, t0: float, t1: float) -> None:
        self._calls.append((t0, t1))

    def fraction(self) -> float | None:
        inside = [u for t, u in self._readings if any(a + PERIOD_S <= t <= b for a, b in self._calls)]
        return statistics.fmean(inside) / 100 if inside else None


def left_running(limit_s: float) -> str:
    """Why a worker fails when a GPU stays busy for limit_s after its call (wait_idle said False)."""
    return f"the GPU was still busy {limit_s:.0f} s after its call had returned: work left running after 'done'"


def wait_idle(device: str, limit_s: float, gpus: int = 1) -> bool:
    """Wait until NVML reads each of the first `gpus` GPUs this process sees (a worker group's: rank
    k runs on cuda:k, harness/worker/worker_group.py join) idle over a whole sample period that began
    after this call: work a worker left queued on any of them when it said "done" has then
    finished, so it is not charged to the next worker's call (harness/measure/alternate.py; a group's rank
    1 could otherwise leave work running on its GPU to slow a rival group there). True at once on
    a CPU or without NVML; False if a GPU stays busy for limit_s."""
    if device != "cuda":
        return True
    handles = [h for h in (nvml.handle(k) for k in range(gpus)) if h is not None]
    if not handles:
        return True
    util, start = _Utilization(), time.perf_counter()
    while time.perf_counter() - start < limit_s:
        time.sleep(INTERVAL_S)
        readings = [lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) == 0 and util.gpu == 0
                    for lib, handle in handles]
        if all(readings) and time.perf_counter() - start >= PERIOD_S:
            return True
    return False
