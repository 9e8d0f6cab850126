"""The session's worker (harness/measure/session.py): starting it beside its buffers and this process's private assets, pausing it, and what its walls are called."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from harness import _common, replies
from harness.ledger import signing
from harness.measure.ballast import Ballast
from harness.measure.shared import SharedBuffer
from harness.measure.worker_process import Failed, WorkerProcess
from harness.sandbox import boundary, cgroup, worker_policy
from harness.target import assets
from harness.errors import Refused

_noted: set[str] = set()


def note_once(line: str) -> None:
    """One line on stderr, once per process (what the worker's walls lack on this machine)."""
    if line not in _noted:
        _noted.add(line)
        print(line, file=sys.stderr, flush=True)


class SessionWorker:
    """Session's worker half; the state is Session's (its __init__), the protocol harness/measure/measuring.py's."""

    def spawn(self) -> None:
        """Load the assets and start the worker; await_ready() waits for it (two sessions beside
        each other start their workers at once: harness/measure/alternate.py)."""
        other = self.assets_from
        if other is not None:
            self.bench_x, self.bench_ref = other.bench_x, other.bench_ref
        else:
            self.bench_x, self.bench_ref, _ = assets.load_reference_asset(self.goals, self.adapter, self.preset)
        self._new_buffers()
        scratch = boundary.SCRATCH
        if self.unsandboxed:
            self.scratch = Path(tempfile.mkdtemp(prefix="auto-optim-worker-"))
            scratch = str(self.scratch)
        self.gpus = worker_policy.gpus(self.device, self.ranks, sandboxed=not self.unsandboxed)
        self.policy = worker_policy.policy(self.candidate, self._hidden(), self.gpus, self.goals, scratch, self.ranks)
        self.worker_cfg = {
            "goals_path": str(_common.goals_path()), "device": self.device,
            "candidate": worker_policy.candidate_path(self.goals, scratch),
            "candidate_home": None if (home := worker_policy.candidate_home(self.candidate)) is None else str(home),
            "project_names": sorted(worker_policy.project_names(self.goals, self.source)),
            "source": self.source.decode(), "input": self.inp.spec(), "output": self.out.spec(), "ranks": self.ranks,
            "landlock": {"readable": self.policy.readable(), "listable": list(self.policy.masked),
                         "hidden": list(self.policy.hidden), "writable": list(self.policy.writable)}
            if self.landlock_abi > 0 else None,
        }
        if self.memory_gb is not None:  # all this process will hold is in place before the ballast
            self._load_private()
            self.ballast = Ballast(self.ranks, self.memory_gb).take()
        self._start_worker()
        if self.memory_gb is None:  # while the worker starts
            self._load_private()

    def _new_buffers(self) -> None:
        """The shared input and output buffers of a worker (a fresh worker gets fresh ones: an old
        buffer still holds the last input and output its worker was given)."""
        for b in self.buffers:
            b.close()
        x, ref = self.bench_x, self.bench_ref
        self.inp = SharedBuffer(list(x.shape), x.dtype, self.device)
        self.out = SharedBuffer(list(ref.shape), ref.dtype, self.device)
        self.buffers = [self.inp, self.out]
        self.private_out = torch.empty_like(self.out.tensor)

    def _start_worker(self) -> None:
        try:
            self.worker = WorkerProcess(self.worker_cfg, [b.fd for b in self.buffers], self.policy, not self.unsandboxed,
                                        self.timeouts, self.worker_memory_bytes, self.worker_tasks)
        except Failed as e:
            raise Refused(f"the worker could not start: {e}") from None
        if self.worker.cgroup_note:
            note_once(f"harness: {self.worker.cgroup_note}; {self.worker_label()}")

    def _load_private(self) -> None:
        """Load what only this process may see: the pool, the benchmark pair on the device (and
        the frozen model, where the reference follows the output). Under a memory limit, also what
        checking a call allocates here, kept in this process's allocator cache, so that its
        checks never take from the memory left to the worker."""
        other = self.assets_from
        self.pool = other.pool if other else assets.load_pool(self.goals, self.adapter, self.preset, self.device)
        if assets.reference_follows_output(self.adapter):
            self.frozen_model = other.frozen_model if other else self.adapter.load_model(self.device)
        self.bench_x, self.bench_ref = self.bench_x.to(self.device), self.bench_ref.to(self.device)
        if self.memory_gb is not None:  # a passing output, so that the compare takes its whole path
            for ref in [self.bench_ref] + [p["output"] for p in self.pool[:1]]:
                self.private_out.copy_(ref)
                self.adapter.compare(self.private_out, ref, self.goals["gate"])

    def await_ready(self) -> None:
        try:
            abi, self.load_s = replies.ready(self.worker.reply("start", self.timeouts["start_s"]))
        except (Failed, replies.Malformed) as e:
            raise Refused(f"the worker could not start: {e}") from None
        if abi < self.landlock_abi:
            raise Refused("the worker did not confirm its Landlock rules")

    def _hidden(self) -> list[Path]:
        """What the worker may never read: the inputs, references and pool, and the key that signs
        records (harness/ledger/signing.py)."""
        return [*assets.secret_paths(self.goals), *signing.key_dirs()]

    def stop_worker(self) -> None:
        """End the worker and everything it started (at the end, or at once after a failure)."""
        if self.worker is not None:
            self.resume()  # a worker stopped beside another (alternate.py) must hear "exit"
            self.worker.close()
            self.worker = None

    def pause(self) -> str | None:
        """Freeze the worker and all it started (while another worker is timed: alternate.py): the
        kernel's cgroup freezer where there is one (harness/sandbox/cgroup.py), else signals. None once
        frozen; else why not, the worker stopped (a worker that stays running beside its rival's
        timed call would be measured against a rival it slows)."""
        if self.worker is None:
            return None
        why = self.worker.freeze()
        if why is not None:
            self.gone = why
            self.stop_worker()
        return why

    def resume(self) -> None:
        if self.worker is not None:
            self.worker.thaw()

    def worker_label(self) -> str:
        """How the worker is paused and bounded (its cgroup, harness/sandbox/cgroup.py)."""
        group = self.worker.cgroup if self.worker is not None else None
        return (group or cgroup.WorkerCgroup(None, None)).label()

    def sandbox_label(self) -> str:
        """What the row says of the walls: a person's --unsandboxed run claims none (its cgroup
        still freezes and bounds it where one could be made)."""
        if self.unsandboxed:
            return "none (--unsandboxed)"
        return f"{boundary.describe(self.landlock_abi, self.ranks)}; {self.worker_label()}"
