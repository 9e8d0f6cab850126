"""One measurement of one candidate: the harness side of the worker protocol.

verify, bench, profile and run_experiment all measure through `Session`, in the same way:

    with Session(candidate, preset, device) as s:
        facts = s.measure()          # build, then warm-up and timed calls: every one checked
        if facts["passed"]:
            s.profile(facts)         # optional: one more call, profiled (also checked)

The trust boundary. This process holds the benchmark input, the strict-fp32 reference and the pool
of fresh inputs with their references; it never imports the candidate. (A target whose reference
depends on the output itself, such as an LLM's greedy token path, has an adapter with
`reference_for_output` and a pool of inputs only: this process then loads the frozen model too,
its own copy, and computes each call's reference from the input and the output it holds.) The
candidate runs in a worker process (harness/worker/main.py) in namespaces of its own
(harness/sandbox/boundary.py: bubblewrap, an allow-list view, a seccomp filter), with Landlock inside as a
second wall (harness/sandbox/landlock.py), in a cgroup of its own that the kernel freezes and bounds
(harness/sandbox/cgroup.py): it cannot see this process or act on it, read those files or the records,
write anything that outlives it (a file, a keyring), reach a network, run while its rival is
timed, or take the host's memory, and everything it starts dies with it. The two share only an
input buffer and an output buffer (harness/measure/shared.py), passed as file descriptors.

Every call is the same call: the harness poisons the output buffer, starts its clock, and only
then writes the input into the shared buffer (the benchmark input, or a pool input the worker
has never seen, in an order drawn from os.urandom; warm-up calls too), says "call", waits for
"done", copies the output buffer into private memory and stops the clock. The input copy is inside
the timed interval (calibrated before any candidate code runs, as `boundary_s`), so a worker that
watches its buffers cannot start before the clock. Then the harness checks that output against
its reference with the target's own gate (adapter.compare) and that the input was left alone (a
reference that follows the output is computed first, in strict fp32, off the clock). So a worker
that says "done" before the output is written hands over poison; work left running after "done"
is charged to the next call, which cannot start before it; and no call can be skipped, cached or
special-cased without failing the gate. The quality a run reports is the worst over all its calls.
Every reply of the worker is checked (harness/replies.py) before it is used; a malformed one is a
crash. A preset of several ranks changes nothing here: its worker is rank 0 of a worker group in
the same sandbox (harness/worker/worker_group.py), and says "done" only once every rank has.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from harness import machine, _common
from harness.target import assets
from harness.sandbox import boundary, cgroup, cgroup_make, landlock, snapshot
from harness import replies
from harness.measure.measuring import Measuring
from harness.measure.session_worker import SessionWorker
from harness.measure.ballast import Ballast
from harness.target.assets import strict_fp32
from harness.measure.worker_process import Failed, WorkerProcess
from harness.measure.shared import SharedBuffer
from harness.errors import Refused

DEFAULT_TIMEOUTS = {"start_s": 600.0, "build_s": 1800.0, "call_s": 600.0}
_rng = random.SystemRandom()


def _worse(q: float | None, than: float | None, better: str) -> bool:
    """Is figure q worse than `than` (None: nothing yet)? `better` says which way is better."""
    if q is None or than is None:
        return than is None and q is not None
    return q > than if better == "lower" else q < than


def _poison(t: torch.Tensor) -> None:
    t.fill_(float("nan") if t.is_floating_point() else -1)


class Session(Measuring, SessionWorker):
    """Assets, buffers and one worker for one candidate (see the module docstring)."""

    def __init__(self, candidate: Path | str | None = None, preset: str | None = None, device: str | None = None,
                 *, unsandboxed: bool = False, timeout: float | None = None, runs: int | None = None,
                 assets_from: "Session | None" = None, memory_gb: float | None = None) -> None:
        self.goals = _common.load_goals()
        self.adapter = _common.load_adapter(self.goals)
        self.device = device or machine.default_device()
        self.preset = _common.pick_preset(self.goals, preset, self.device)
        cfg = self.goals["presets"][self.preset]
        self.ranks = self.goals.presets[self.preset].ranks
        self._check_group()
        self.candidate = Path(os.path.abspath(candidate)) if candidate else _common.root() / self.goals["candidate"]
        if not self.candidate.is_file():
            raise Refused(f"candidate file not found: {self.candidate}")
        try:  # the agent's file, read once without following a link (harness/sandbox/snapshot.py)
            self.source = snapshot.read(self.candidate, _common.root())
        except snapshot.nofollow.NotPlain as e:
            raise Refused(str(e)) from None
        self.unsandboxed = unsandboxed
        self.timeouts = {**DEFAULT_TIMEOUTS, **self.goals.get("timeouts", {})}
        if timeout is not None:
            self.timeouts.update(build_s=timeout, call_s=timeout)
        self.warmup = max(1, int(cfg.get("warmup_runs", 1)))
        self.runs = max(_common.MIN_RUNS, int(runs or cfg.get("timed_runs", _common.MIN_RUNS)))
        if not unsandboxed:
            why = boundary.available()
            if why:
                raise Refused(f"no sandbox for the candidate: {why}; pass --unsandboxed to run it without "
                                   "one (a person's choice: its row will say so)")
        self.landlock_abi = 0 if unsandboxed else landlock.abi_version()
        self.worker: WorkerProcess | None = None
        self.frozen_model: torch.nn.Module | None = None  # this process's own, where the reference follows the output
        self.buffers: list[SharedBuffer] = []
        self.scratch: Path | None = None  # unsandboxed only: the sandbox brings a tmpfs of its own
        self.calls_made = 0
        self.used: set[int] = set()
        self.assets_from = assets_from  # a session beside this one (alternate.py): its inputs and references
        if memory_gb is not None and assets.reference_follows_output(self.adapter):
            raise Refused(f"a memory limit needs references made beforehand; {self.goals['adapter']} "
                                     "computes each call's in this process, which would take from the worker's share")
        if memory_gb is not None and self.device != "cuda":
            raise Refused("a memory limit (--memory-gb, a preset's memory_gb) needs a GPU")
        self.memory_gb = memory_gb      # the GB the worker finds free on each GPU (harness/measure/memory_limit.py)
        self.ballast: Ballast | None = None
        # The host memory the worker's cgroup may hold, all its processes together (harness/sandbox/cgroup.py).
        gb = self.goals.worker_memory_gb
        self.worker_memory_bytes = int(gb * cgroup.GB) if gb is not None else cgroup_make.default_memory_bytes()
        self.worker_tasks = int(self.goals.get("worker_tasks", cgroup.DEFAULT_TASKS))  # its pids.max (checked: goals.py)
        self.gone: str | None = None    # why the worker was stopped early (a freeze the kernel could not make)

    # --- setting up -------------------------------------------------------------------------

    def _check_group(self) -> None:
        """A preset of several ranks (a worker group, harness/worker/worker_group.py) needs a target that
        can split a call (its adapter's build_split) and, on GPUs, one GPU a rank."""
        if self.ranks == 1:
            return
        if not callable(getattr(self.adapter, "build_split", None)):
            raise Refused(f"preset {self.preset} runs on {self.ranks} ranks, but the target's adapter "
                                     f"({self.goals['adapter']}) has no build_split to run a call across them")
        if self.device == "cuda" and torch.cuda.device_count() < self.ranks:
            raise Refused(f"preset {self.preset} needs {self.ranks} GPUs, one a rank; "
                                     f"{torch.cuda.device_count()} are visible here")

    def __enter__(self) -> "Session":
        try:
            self.spawn()
            self.await_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_worker()
        if self.ballast is not None:
            self.ballast.release()
            self.ballast = None
        for b in self.buffers:
            b.close()
        self.buffers = []
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    # --- the calls (measure, begin, timed_call, finish: harness/measure/measuring.py) ----------------------------------------------------------------------------

    def _fresh(self, n: int) -> list[int]:
        """n pool inputs this worker has not been given yet (a strict-fp32 one first, if any)."""
        left = [i for i in range(len(self.pool)) if i not in self.used]
        if len(left) < n:
            raise Refused(f"the pool for preset {self.preset} has {len(self.pool)} inputs, this run needs "
                               f"{len(self.used) + n}; remake it: python -P -m harness.target.make_reference --only pool --force")
        strict = [i for i in left if self.pool[i]["strict"]][:1]
        picks = strict + _rng.sample([i for i in left if i not in strict], n - len(strict))
        self.used.update(picks)
        return picks

    def _plan(self, n: int) -> list[tuple[str, int | None]]:
        """Which input each of n calls gets: the benchmark input once, fresh pool inputs for the
        rest, in an order the worker cannot predict."""
        plan: list[tuple[str, int | None]] = [("pool", i) for i in self._fresh(n - 1)] + [("benchmark", None)]
        _rng.shuffle(plan)
        return plan

    def _round_trip(self, op: str, x: torch.Tensor) -> tuple[float, dict[str, Any]]:
        """Poison the output buffer; start the clock; only then hand over input x and ask for `op`;
        copy the output here: the seconds from the clock's start to holding the output (every call,
        and the boundary's calibration, is timed this way), and the reply."""
        if self.worker is None:  # stopped early: a freeze the kernel could not make (pause)
            raise Failed("crash", self.gone or "the worker is gone")
        _poison(self.out.tensor)
        machine.sync(self.device)
        t0 = time.perf_counter()
        self.inp.tensor.copy_(x)
        machine.sync(self.device)
        reply = self.worker.request(op, self.timeouts["call_s"])
        self.private_out.copy_(self.out.tensor)
        machine.sync(self.device)
        self.last_call = (t0, time.perf_counter())
        return self.last_call[1] - t0, reply

    def _call(self, op: str, which: tuple[str, int | None], facts: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """Hand over one input, time until the complete output is held here, check it."""
        kind, i = which
        x, ref = (self.bench_x, self.bench_ref) if kind == "benchmark" else (self.pool[i]["input"], self.pool[i]["output"])
        seconds, reply = self._round_trip(op, x)
        self.calls_made += 1
        name = "benchmark input" if kind == "benchmark" else f"fresh input {self.calls_made}"
        error = self._checked(op, replies.call_error, reply)
        if error:
            raise Failed("gate_fail", f"{name}: {error}")
        host = self._checked(op, lambda r: replies.host(r, self.ranks), reply)
        if not torch.equal(self.inp.tensor, x):
            raise Failed("gate_fail", f"the candidate modified its input ({name})")
        if self.frozen_model is not None:
            ref = self._reference_for_output(x)
            if kind == "benchmark":
                self.bench_ref = ref  # what the benchmark output was checked against (verify's frames)
        res = self.adapter.compare(self.private_out, ref, self.goals["gate"])
        if not res["passed"]:
            raise Failed("gate_fail", f"{name}: {res['reason']}")
        q, m = res.get("quality"), res.get("max_abs")
        facts["checked"].append({"input": name, "seconds": seconds, "quality": q, "max_abs": m})
        # One entry a call, as facts["checked"]: the worker's figures of its launching threads, a claim.
        facts.setdefault("claims", {}).setdefault("host", []).append(host)
        better = self.goals["gate"].get("quality_better", "higher")
        prefix = "benchmark_" if kind == "benchmark" else "fresh_"
        for key in ("", prefix):  # the worst over every call, and over its kind of input
            if _worse(q, facts.get(key + "quality"), better):
                facts[key + "quality"] = q
            if _worse(m, facts.get(key + "max_abs"), "lower"):
                facts[key + "max_abs"] = m
        if kind == "benchmark" and facts.get("want_frame"):
            facts["_bench_out"] = self.private_out.detach().to("cpu", copy=True)
        return seconds, reply

    def _checked(self, op: str, read, reply: dict[str, Any]):
        """read(reply), a malformed reply being the candidate's crash."""
        try:
            return read(reply)
        except replies.Malformed as e:
            raise Failed("crash", f"malformed reply to '{op}': {e}") from None

    def _reference_for_output(self, x: torch.Tensor) -> torch.Tensor:
        """The frozen model's reference for the output just received (private_out), in strict fp32."""
        with strict_fp32(), torch.no_grad():
            ref = self.adapter.reference_for_output(self.frozen_model, x, self.private_out)
        machine.sync(self.device)
        return ref

    def profile(self, facts: dict[str, Any]) -> dict[str, Any] | None:
        """One profiled call, then the FLOP count (count_flops), in a fresh worker that is given
        nothing hidden: the worker that was measured is stopped first (it has seen the benchmark
        input and pool inputs, and its reply here is text the agent reads: a profile's rows could
        carry them), and the fresh one, on fresh buffers, is built and called on throwaway inputs
        (adapter.make_input, random seeds) that are never used for timing or the gate; its outputs
        are not judged, only its failures are. What it reports about itself is the candidate's
        claim: its figures are kept as such, in facts["claims"]["profile"] (harness/measure/profile.py
        claimed); they inform, and are never the metric nor, alone, the stop rule's
        (harness/decide/floor.py verdict). The worker that was measured is gone after this."""
        from harness.measure import profile

        try:
            self._fresh_worker()
            rep = self._throwaway_call("profile")
            summary = self._checked("profile", replies.profile, rep)
        except (Failed, Refused) as e:
            facts.update(passed=False, status=getattr(e, "status", "crash"), reason=f"while profiling: {e}")
            return None
        facts.setdefault("claims", {})["profile"] = profile.claimed(summary, facts.get("median_s"))
        return summary if self.count_flops(facts) else None

    def _throwaway(self) -> torch.Tensor:
        """An input of the benchmark's shape that nothing else uses (made on the CPU, as the build's example)."""
        x = self.adapter.make_input(list(self.bench_x.shape), _rng.getrandbits(63), "cpu")
        return x.to(self.bench_x.dtype)

    def _fresh_worker(self) -> None:
        """Stop this session's worker; start, await and build a fresh one on fresh buffers with a
        throwaway example, then warm it up with throwaway calls (a compile's first call is not the
        profile's)."""
        self.stop_worker()
        self._new_buffers()
        self._start_worker()
        self.await_ready()
        self.inp.tensor.copy_(self._throwaway())
        machine.sync(self.device)
        self._checked("build", lambda r: replies.info(r.get("info")), self.worker.request("build", self.timeouts["build_s"]))
        for _ in range(self.warmup):
            self._throwaway_call("call")

    def _throwaway_call(self, op: str) -> dict[str, Any]:
        """`op` on a throwaway input: a failure is the candidate's, the output is not judged."""
        x = self._throwaway()
        _, reply = self._round_trip(op, x)
        error = self._checked(op, replies.call_error, reply)
        if error:
            raise Failed("gate_fail", f"a throwaway input: {error}")
        return reply

    def count_flops(self, facts: dict[str, Any]) -> bool:
        """The FLOPs the candidate executes in one call (torch's FlopCounterMode around a call in
        the worker, on a throwaway input, in profile's fresh worker): the worker's count, so a claim,
        kept as facts["claims"]["executed_flops"] (harness/decide/floor.py never takes it above the
        model's nominal count); False if the call failed."""
        try:
            counted = self._throwaway_call("flops")
            count, error = self._checked("flops", replies.flops, counted)
        except (Failed, Refused) as e:
            facts.update(passed=False, status=getattr(e, "status", "crash"), reason=f"while counting FLOPs: {e}")
            return False
        claims = facts.setdefault("claims", {})
        claims["executed_flops"] = count
        if error:
            claims["executed_flops_error"] = error
        return True
