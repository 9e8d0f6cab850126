"""Making a worker's cgroup: where this process's cgroups are (v2, v1, a hybrid), a folder of the worker's own in each, its bounds."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox.cgroup import DEFAULT_SHARE, DEFAULT_TASKS, PREFIX, WorkerCgroup, _counter, _read, _write


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
    """Remove the cgroups of harness processes that are gone (one killed before it could). A worker
    of theirs left frozen cannot die of the SIGKILL its parent's death sent it (bwrap
    --die-with-parent) until it thaws: thawed here, it is gone by the next sweep."""
    try:
        entries = [e for e in home.iterdir() if e.name.startswith(PREFIX)]
    except OSError:
        return
    for e in entries:
        pid = e.name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            for name, thawed in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                if (e / name).exists():
                    try:
                        _write(e / name, thawed)
                    except OSError:
                        pass
            try:
                e.rmdir()
            except OSError:
                pass


def thaw_processes(pids: Iterable[int]) -> None:
    """Thaw the worker cgroups (ours: named PREFIX...) these processes are in. A process frozen by
    v1's freezer takes no signal, not even SIGKILL, until its cgroup thaws, so a wait for a killed
    worker that was paused (a rival the harness stopped while it was frozen) would never end.
    Thawed after the SIGKILL was sent, it dies before it runs another instruction of its own."""
    folders: set[tuple[int, Path]] = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            _, controllers, path = line.split(":", 2)
            version = 2 if controllers == "" else 1 if "freezer" in controllers.split(",") else 0
            if not version or not Path(path).name.startswith(PREFIX):
                continue
            for mount in _mounts():
                folder = _folder(mount, path) if mount.version == version and (
                    version == 2 or "freezer" in mount.controllers) else None
                if folder is not None:
                    folders.add((version, folder))
    for version, folder in folders:
        try:
            _write(folder / ("cgroup.freeze" if version == 2 else "freezer.state"), "0" if version == 2 else "THAWED")
        except OSError:
            pass  # gone, or not a freezer


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
