"""A cgroup of its own for each worker: a freezer, a memory bound and a bound on its tasks that
the kernel enforces.

    group, note = cgroup.make(memory_bytes, tasks)   # None and why, where this machine allows none
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


# --- where this process's cgroups are ----------------------------------------------------------

@dataclass(frozen=True)
class Mount:
    version: int
    root: str                 # the hierarchy's path that is mounted (a container's: its own)
    point: Path
    controllers: frozenset[str]


def _mounts() -> list[Mount]:
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(fields[4].replace("\\040", " "))
        opts = frozenset(rest[2].split(","))
        out.append(Mount(2 if rest[0] == "cgroup2" else 1, fields[3], point, opts))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup by hierarchy: '' for v2's, a v1 controller's name for its own."""
    out = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if not controllers:
            out[""] = path
        for c in controllers.split(","):
            out.setdefault(c, path)
    return out


def _folder(mount: Mount, path: str) -> Path | None:
    """The folder of cgroup `path` under `mount`, None where that mount does not show it."""
    root = mount.root.rstrip("/") or "/"
    if root != "/" and not (path == root or path.startswith(root + "/")):
        return None
    rel = path[len(root):].lstrip("/") if root != "/" else path.lstrip("/")
    folder = mount.point / rel
    return folder if folder.is_dir() else None


def _v2_homes() -> list[Path]:
    """Where a v2 worker cgroup may go: below this process's own cgroup where that is the root (a
    cgroup with processes cannot hand its children controllers), else beside it."""
    own = _own_paths().get("")
    mount = next((m for m in _mounts() if m.version == 2), None)
    if own is None or mount is None:
        return []
    folder = _folder(mount, own)
    if folder is None:
        return []
    homes = [folder]
    if folder != mount.point:
        homes.append(folder.parent)
    return homes


def _v1_home(controller: str) -> Path | None:
    own = _own_paths().get(controller)
    mount = next((m for m in _mounts() if m.version == 1 and controller in m.controllers), None)
    if own is None or mount is None:
        return None
    return _folder(mount, own)


# --- making one ---------------------------------------------------------------------------------

def _new_folder(home: Path, name: str) -> Path | None:
    _sweep(home)
    folder = home / name
    try:
        folder.mkdir()
    except OSError:
        return None
    return folder


def _sweep(home: Path) -> None:
    """Remove the empty cgroups of harness processes that are gone (one killed before it could)."""
    try:
        entries = [e for e in home.iterdir() if e.name.startswith(PREFIX)]
    except OSError:
        return
    for e in entries:
        pid = e.name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                e.rmdir()
            except OSError:
                pass


def _v2_memory(folder: Path, memory_bytes: int) -> bool:
    if not (folder / "memory.max").exists():
        return False
    _write(folder / "memory.max", str(memory_bytes))
    for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
        if (folder / name).exists():
            _write(folder / name, value)
    return True


def _pids_max(folder: Path, tasks: int | None) -> bool:
    """Set the task bound where the cgroup has the pids controller."""
    if tasks is None or not (folder / "pids.max").exists():
        return False
    try:
        _write(folder / "pids.max", str(tasks))
    except OSError:
        return False
    return True


def _try_v2(name: str, memory_bytes: int | None, need_memory: bool) -> WorkerCgroup | None:
    """A v2 cgroup with a freezer (and the memory bound, where need_memory): the first home that gives it."""
    for home in _v2_homes():
        _enable(home, ["memory", "pids"] if need_memory else ["pids"])
        folder = _new_folder(home, name)
        if folder is None:
            continue
        try:
            memory = memory_bytes is not None and _v2_memory(folder, memory_bytes)
        except OSError:
            memory = False
        if (folder / "cgroup.freeze").exists() and (memory or not need_memory):
            return WorkerCgroup((2, folder), (2, folder) if memory else None, memory_bytes if memory else None, [folder])
        try:
            folder.rmdir()
        except OSError:
            pass
    return None


def _enable(home: Path, controllers: list[str]) -> None:
    """Hand controllers (memory, pids) to home's children where they are offered and not yet
    handed (allowed in the root cgroup, or one without processes of its own): in one write, else
    (one refused) each alone."""
    try:
        offered = _read(home / "cgroup.controllers").split()
        handed = _read(home / "cgroup.subtree_control").split()
    except OSError:
        return
    wanted = [f"+{c}" for c in controllers if c in offered and c not in handed]
    for attempt in ([" ".join(wanted)] if wanted else []) + (wanted if len(wanted) > 1 else []):
        try:
            _write(home / "cgroup.subtree_control", attempt)
            if attempt == " ".join(wanted):
                return
        except OSError:
            pass


def _try_v1_pids(name: str, tasks: int | None) -> Path | None:
    """A cgroup in v1's pids hierarchy bounded at `tasks`, None where there is none to be had."""
    home = _v1_home("pids")
    folder = _new_folder(home, name) if home and tasks is not None else None
    if folder is not None and not _pids_max(folder, tasks):
        folder.rmdir()
        return None
    return folder


def _try_v1(name: str, memory_bytes: int | None) -> tuple[tuple[int, Path] | None, tuple[int, Path] | None, list[Path]]:
    made, freezer, memory = [], None, None
    home = _v1_home("freezer")
    folder = _new_folder(home, name) if home else None
    if folder is not None and (folder / "freezer.state").exists():
        freezer = (1, folder)
        made.append(folder)
    home = _v1_home("memory")
    folder = _new_folder(home, name) if home and memory_bytes is not None else None
    if folder is not None:
        try:
            _write(folder / "memory.limit_in_bytes", str(memory_bytes))
            if (folder / "memory.memsw.limit_in_bytes").exists():  # swap counted: none beyond the bound
                _write(folder / "memory.memsw.limit_in_bytes", str(memory_bytes))
            memory = (1, folder)
            made.append(folder)
        except OSError:
            folder.rmdir()
    return freezer, memory, made


def make(memory_bytes: int | None, tasks: int | None = DEFAULT_TASKS) -> tuple[WorkerCgroup | None, str]:
    """A fresh cgroup for one worker, bounded at memory_bytes and `tasks` tasks; (None, why) where
    no freezer, no memory bound and no task bound can be had here, else (the cgroup, what it
    lacks: "" when nothing)."""
    name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
    try:
        group = _try_v2(name, memory_bytes, need_memory=True)
        if group is None:
            freezer, memory, made = _try_v1(name, memory_bytes)
            v2 = None
            if freezer is None:  # a hybrid host without v1's freezer: v2's, freezer only
                v2 = _try_v2(name, None, need_memory=False)
                if v2 is not None:
                    freezer, made = v2.freezer, made + v2.made
            group = WorkerCgroup(freezer, memory, memory_bytes if memory else None, made) if made else None
            if group is not None and v2 is not None and _pids_max(v2.made[0], tasks):
                group.tasks, group.tasks_max = (2, v2.made[0]), tasks
        elif _pids_max(group.made[0], tasks):
            group.tasks, group.tasks_max = (2, group.made[0]), tasks
        if group is None or group.tasks is None:  # the pids bound from v1's hierarchy
            folder = _try_v1_pids(name, tasks)
            if folder is not None:
                group = group or WorkerCgroup(None, None)
                group.made.append(folder)
                group.tasks, group.tasks_max = (1, folder), tasks
    except OSError as e:
        return None, f"cgroups refused: {e}"
    if group is None:
        return None, ("no cgroup could be made for the worker (cgroup v2 and v1 freezer and memory "
                      "hierarchies absent or not writable by this user: run as root, or in a delegated cgroup)")
    lacks = [what for what, have in (("freezer", group.freezer), ("memory bound", group.memory),
                                     ("task bound", group.tasks)) if not have]
    return group, (f"the worker's cgroup has no {' and no '.join(lacks)}" if lacks else "")


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


def host_memory_bytes() -> int:
    """The memory this process may use: the host's (MemTotal), or its own memory cgroup's limit where lower."""
    total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    limits = [total] if total else []
    for version, home in ((2, next(iter(_v2_homes()), None)), (1, _v1_home("memory"))):
        if home is None:
            continue
        try:
            text = _read(home / ("memory.max" if version == 2 else "memory.limit_in_bytes")).strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else 16 << 30


def default_memory_bytes() -> int:
    """The bound of each worker where goals.json names none ("worker_memory_gb"): DEFAULT_SHARE
    (40%) of the memory this process may use (host_memory_bytes). Two workers live at once (the
    keeper's and the candidate's, harness/measure/alternate.py), and the harness beside them holds the
    references and the pool: the two bounds leave a fifth to the harness and the system."""
    return int(DEFAULT_SHARE * host_memory_bytes())
