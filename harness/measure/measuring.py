"""The steps of a measurement, for harness/measure/session.py's Session: calibrate the boundary, build and
warm up (begin), the timed calls one at a time (timed_call), then the figures (finish). measure()
runs them in a row; harness/measure/alternate.py runs two sessions' steps in alternation.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from harness import hashing, machine, replies
from harness.target import assets
from harness.measure import busy
from harness.measure.busy import BusySampler
from harness.measure.worker_process import Failed

CALIBRATIONS = 3          # null round trips that time the boundary before any candidate code runs
_rng = random.SystemRandom()


def _stats(times: list[float]) -> dict[str, float]:
    med = statistics.median(times)
    return {"median_s": med, "min_s": min(times), "max_s": max(times),
            "mad_s": statistics.median(abs(t - med) for t in times),
            "spread_s": max(times) - min(times)}



class Measuring:
    """Mixed into Session: the calls and their checks are its own (_round_trip, _call, _plan)."""

    def measure(self, want_frame: bool = False, calls: int | None = None) -> dict[str, Any]:
        """Calibrate the boundary, build, then warm-up and timed calls (or just `calls` checked
        calls, for verify: a call cannot tell which it is, and every call is checked alike).
        Never raises for the candidate's failures: they come back as facts["status"] and
        facts["reason"]. harness/measure/alternate.py runs the same three steps for two sessions at once."""
        facts = self.begin(want_frame, calls)
        while self.rested(facts) and self.timed_call(facts):
            pass
        return self.finish(facts)

    def rested(self, facts: dict[str, Any]) -> bool:
        """Wait, before a timed call, until this worker's GPUs have read idle over a whole NVML sample
        period, as harness/measure/alternate.py waits before each of a pair's calls (busy.py: a GPU
        at its power cap runs a call faster after an idle moment). False when no call is left or the
        worker has failed: here, when a GPU stays busy for a call's timeout after its call (its own
        work, as far as the harness can tell: nothing else of the harness's runs there meanwhile)."""
        if facts["status"] != "measured" or not self._todo:
            return False
        if busy.wait_idle(self.device, self.timeouts["call_s"], self.ranks):
            return True
        self.fail(facts, "gate_fail", busy.left_running(self.timeouts["call_s"]))
        return False

    def begin(self, want_frame: bool = False, calls: int | None = None, runs: int | None = None) -> dict[str, Any]:
        """The boundary's calibration, the build and the warm-up calls; the timed calls are planned."""
        if runs is not None:
            self.runs = runs
        facts: dict[str, Any] = {
            "passed": False, "status": "measured", "reason": "", "preset": self.preset, **machine.env_info(self.device, self.ranks),
            "ranks": self.ranks,
            "candidate": str(self.candidate), "candidate_sha": hashing.sha256_bytes(self.source),
            "weights_kind": self.adapter.weights_kind(), "sandbox": self.sandbox_label(),
            "input": f"asset {assets.input_path(self.preset).name}", "runs": self.runs, "warmup_runs": self.warmup,
            "quality": None, "max_abs": None, "benchmark_quality": None, "benchmark_max_abs": None,
            "fresh_quality": None, "fresh_max_abs": None, "device_busy": None,
            "quality_name": self.goals.quality_name, "checked": [],
            "want_frame": want_frame, "worker_load_s": self.load_s,
        }
        self._times: list[float] = []
        self._busy = BusySampler(self.device)

        def start() -> None:
            facts["boundary_s"] = statistics.median(self._round_trip("calibrate", self.bench_x)[0]
                                                    for _ in range(CALIBRATIONS))
            # made on the CPU: under a memory limit nothing here may allocate on the GPU (memory_limit.py)
            example = self.adapter.make_input(list(self.bench_x.shape), _rng.getrandbits(63), "cpu")
            self.inp.tensor.copy_(example.to(self.bench_x.dtype))
            machine.sync(self.device)
            self._busy.__enter__()  # its thread starts before any candidate code runs
            t0 = time.perf_counter()
            built = self.worker.request("build", self.timeouts["build_s"])
            facts["build_s"] = time.perf_counter() - t0
            facts["info"] = self._checked("build", lambda r: replies.info(r.get("info")), built)
            if calls is not None:
                self.warmup, self.runs = 1, max(calls - 1, 1)
                facts.update(runs=self.runs, warmup_runs=1)
            self._todo = self._plan(self.warmup + self.runs)
            for _ in range(self.warmup):
                self._times.append(self._call("call", self._todo.pop(0), facts)[0])

        self._todo = []
        self._guarded(facts, start)
        return facts

    def timed_call(self, facts: dict[str, Any]) -> bool:
        """The next timed call; False when none is left or the candidate has failed."""
        if facts["status"] != "measured" or not self._todo:
            return False

        def call() -> None:
            self._times.append(self._call("call", self._todo.pop(0), facts)[0])
            self._busy.mark(*self.last_call)

        return self._guarded(facts, call)

    def finish(self, facts: dict[str, Any]) -> dict[str, Any]:
        """The figures of the timed calls, and the worker's peak memory."""
        self._busy.__exit__(None, None, None)

        def end() -> None:
            facts["device_busy"] = self._busy.fraction()
            facts["first_calls_s"] = sum(self._times[: self.warmup])
            facts["warmup_s"] = facts["build_s"] + facts["first_calls_s"]
            facts["times_s"] = self._times[self.warmup:]
            facts.update(_stats(facts["times_s"]))
            facts["boundary_pct"] = 100 * facts["boundary_s"] / facts["median_s"]
            memory = self.worker.request("memory", self.timeouts["call_s"])
            facts["peak_mem_gb"] = self._checked("memory", replies.peak_memory_gb, memory)
            if self.ranks > 1:
                facts["peak_mem_of"] = f"the largest of {self.ranks} ranks"
            facts["passed"] = True

        if facts["status"] == "measured":
            self._guarded(facts, end)
        facts.pop("want_frame", None)
        return facts

    def fail(self, facts: dict[str, Any], status: str, reason: str) -> None:
        """Record the failure and stop the worker now: what it left running (a kernel, a collective
        that never ends) must not run beside a rival's timed call (harness/measure/alternate.py)."""
        facts.update(status=status, reason=replies.one_line(reason, 500))
        self._todo = []
        self.stop_worker()

    def _guarded(self, facts: dict[str, Any], step) -> bool:
        try:
            step()
            return True
        except Failed as e:
            self.fail(facts, e.status, str(e))
        except (ValueError, TypeError, OverflowError, RuntimeError, OSError) as e:
            # Whatever the worker did that the checks above did not foresee is its crash, on record:
            # never a harness traceback that leaves no row.
            self.fail(facts, "crash", f"the harness could not go on: {type(e).__name__}: {e}")
        return False
