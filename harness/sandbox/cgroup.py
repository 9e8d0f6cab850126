"""A cgroup of its own for each worker: a freezer, a memory bound and a bound on its tasks that
the kernel enforces.

    group, note = cgroup_make.make(memory_bytes, tasks)   # None and why, where this machine allows none
    argv = cgroup.entering(group, argv)          # /bin/sh joins the cgroup, then execs argv
    group.freeze(); group.thaw()                 # every process of the worker, however it forked
    group.oom_kills(); group.remove()

Why a cgroup. Pausing a worker by signals (harness/measure/process.py signal_tree: SIGSTOP to every
process found in /proc, in rounds) can be outrun: a chain of processes that fork and exit is
never all found at once (the issue saw one run in 318 samples while its worker was "stopped",
i.e. during the rival's timed calls). The kernel's freezer stops every task of a cgroup, and a
task forked meanwhile is born frozen. Likewise a memory limit on the cgroup covers everything
its processes hold: anonymous memory, memfds, the pages of its tmpfs /tmp; past it the kernel's
OOM killer acts inside that cgroup only, so it is the worker that dies, not the harness. And
the pids controller's `pids.max` bounds its tasks (processes and threads, however started): past
it fork and clone fail with EAGAIN, so a worker cannot take the host's PIDs (pid_max) from the
harness, the agent's shell and every other process. (RLIMIT_NPROC would not do: it counts the
processes of a user, and the worker's user namespace maps to the harness's user.)

Joining before anything runs. The harness starts the worker through
`/bin/sh -c 'echo $$ > CG/cgroup.procs && ... && exec "$@"'`: the shell moves itself into the
cgroup (and sets its OOM preference) and only then becomes bwrap, so every process of the
sandbox is born inside; there is no moment when one runs outside it.

Where it can be had, detected at run time:
- cgroup v2 (the unified hierarchy; a Firecracker VM or a modern distribution): one cgroup with
  `cgroup.freeze` and `memory.max` (and `memory.swap.max` 0, `memory.oom.group` 1), made beside
  the harness's own cgroup or, in the root cgroup, below it. Needs write access there: root, or a
  delegated subtree (systemd's Delegate=yes).
- cgroup v1 (separate hierarchies): a cgroup in the freezer hierarchy (`freezer.state`) and one
  in the memory hierarchy (`memory.limit_in_bytes`, and `memory.memsw.limit_in_bytes` where the
  kernel accounts swap), and one in the pids hierarchy (`pids.max`), each below the harness's own.
- a hybrid host: the memory controller's hierarchy decides; the freezer is v1's where mounted,
  else v2's `cgroup.freeze`; the pids bound v2's where the v2 cgroup has the controller, else v1's.
- cgroup v2 without the pids controller in the worker's cgroup (not delegated): no task bound;
  the row says so.
- neither (a non-root user without delegation, a container without its cgroup tree): no cgroup.
  The session then pauses by signals and has no memory bound; the row's sandbox label says so
  and the harness prints one line on stderr.
Finding the hierarchies and making the folders is harness/sandbox/cgroup_make.py's; this module is the
worker's cgroup once made, and how the worker enters it.
"""

from __future__ import annotations

import itertools
import os
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

FREEZE_WAIT_S = 10.0      # a worker idle between calls freezes in microseconds; one in an uninterruptible wait takes longer
POLL_S = 0.0005
GB = 1e9
DEFAULT_SHARE = 0.4       # of the memory this process may use, for each worker (see default_memory_bytes)
# Tasks (processes and threads) of one worker, every rank of a group together, where goals.json
# names no "worker_tasks": far above what torch, its compile workers, Triton, CUDA and NCCL start
# (a few hundred on a large host), far below pid_max (32768 at least).
DEFAULT_TASKS = 4096
PREFIX = "auto-optim-worker-"
_counter = itertools.count(1)


@dataclass
class WorkerCgroup:
    """The cgroup(s) of one worker: `freezer` and `memory` each a (version, folder), or None."""

    freezer: tuple[int, Path] | None
    memory: tuple[int, Path] | None
    memory_bytes: int | None = None
    made: list[Path] = field(default_factory=list)  # every folder made (a v2 cgroup serves both)
    tasks: tuple[int, Path] | None = None           # where its pids.max is
    tasks_max: int | None = None

    @property
    def joins(self) -> list[Path]:
        """The cgroup.procs files the starting shell writes its pid to."""
        return [d / "cgroup.procs" for d in self.made]

    def label(self) -> str:
        """What a row says of it (harness/sandbox/boundary.py describe, session.sandbox_label)."""
        parts = []
        if self.freezer:
            parts.append(f"paused by the kernel's freezer (cgroup v{self.freezer[0]}; a frozen worker still sees "
                         "its rival's call durations as jumps of its own clock, and so that it runs beside one)")
        else:
            parts.append("paused by signals (no cgroup freezer here: a fork-and-exit process can outrun the pause)")
        if self.memory:
            parts.append(f"memory bound {self.memory_bytes / GB:.3g} GB (cgroup v{self.memory[0]}: every process, "
                         "memfd and its /tmp)")
        else:
            parts.append("no memory bound (no memory cgroup here)")
        if self.tasks:
            parts.append(f"at most {self.tasks_max} tasks (cgroup v{self.tasks[0]} pids.max)")
        else:
            parts.append("no bound on its tasks (no pids cgroup here)")
        return "; ".join(parts)

    def tasks_refused(self) -> int:
        """How many of its forks and clones the kernel refused at its task bound (0 where it cannot tell)."""
        if self.tasks is None:
            return 0
        try:
            fields = dict(line.split() for line in _read(self.tasks[1] / "pids.events").splitlines() if len(line.split()) == 2)
        except OSError:
            return 0
        return int(fields.get("max", 0))

    def freeze(self) -> bool:
        """Freeze every process of the worker; True once the kernel says they all are (within FREEZE_WAIT_S)."""
        if self.freezer is None:
            return False
        version, folder = self.freezer
        if version == 2:
            _write(folder / "cgroup.freeze", "1")
            return _wait(lambda: "frozen 1" in _read(folder / "cgroup.events").splitlines())
        _write(folder / "freezer.state", "FROZEN")
        return _wait(lambda: _read(folder / "freezer.state").strip() == "FROZEN")

    def thaw(self) -> None:
        if self.freezer is None:
            return
        version, folder = self.freezer
        try:
            _write(folder / ("cgroup.freeze" if version == 2 else "freezer.state"), "0" if version == 2 else "THAWED")
        except OSError:
            pass  # already removed

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed at its memory bound (0 where it cannot tell)."""
        if self.memory is None:
            return 0
        version, folder = self.memory
        name = "memory.events" if version == 2 else "memory.oom_control"
        try:
            fields = dict(line.split() for line in _read(folder / name).splitlines() if len(line.split()) == 2)
        except OSError:
            return 0
        return int(fields.get("oom_kill", 0))

    def pids(self) -> list[int]:
        out: set[int] = set()
        for procs in self.joins:
            try:
                out.update(int(p) for p in _read(procs).split())
            except OSError:
                pass
        return sorted(out)

    def remove(self) -> None:
        """Kill whatever is left in it (thawed first: a v1-frozen task does not die until thawed), then remove it."""
        self.thaw()
        deadline = time.monotonic() + 5
        while self.pids() and time.monotonic() < deadline:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)
        for folder in reversed(self.made):
            for _ in range(50):  # a killed task leaves its cgroup a moment after it dies
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.made = []


def _read(path: Path) -> str:
    return path.read_text()


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _wait(done) -> bool:
    deadline = time.monotonic() + FREEZE_WAIT_S
    while True:
        try:
            if done():
                return True
        except OSError:
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def entering(group: WorkerCgroup | None, argv: list[str]) -> list[str]:
    """argv started by a shell that first moves itself into the worker's cgroup(s) and sets its
    OOM preference, then becomes argv (exec: the same process): nothing of the worker ever runs
    outside its cgroup, and the preference is set where the worker cannot undo it.

    oom_score_adj 1000: under memory pressure the kernel kills the worker first, never the
    harness; every process it starts inherits it. Written by a privileged harness (root, or
    CAP_SYS_RESOURCE), it also sets the floor the worker may lower it to (oom_score_adj_min), so
    the worker cannot write it back down. An unprivileged harness can only raise it: its worker
    may lower it again to the value it inherited (usually 0), and then only the memory cgroup's
    bound, where there is one, still holds."""
    steps = [f"echo $$ > {shlex.quote(str(p))}" for p in (group.joins if group else [])]
    steps.append("echo 1000 > /proc/self/oom_score_adj")
    return ["/bin/sh", "-c", " && ".join(steps) + ' && exec "$@"', "sh", *argv]
