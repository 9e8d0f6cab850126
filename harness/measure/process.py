"""Process plumbing for the processes the harness starts: a worker (harness/measure/session.py) or a wave's
members (harness/cli/wave.py). Standard library only.

- `Tail` keeps the last lines a process prints, so a flood cannot fill the harness's memory.
- `become_subreaper` makes this process adopt the orphans of what it started (a daemon that
  double-forked is re-parented here, not to init), and `children` lists them, so that
  `kill_tree` and `kill_orphans` can find and kill them. Inside the worker's sandbox its PID
  namespace already does this (the namespace dies with its first process); the sweep covers an
  unsandboxed run and the wave's measuring processes, which are not sandboxed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import IO

from harness.sandbox import cgroup_make

_PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 20  # a chain of forks can outpace one sweep; each round kills what the last one missed


class Tail:
    """The last lines a process prints (its stdout and stderr, merged), read on a thread."""

    MAX_LINES: int | None = 200

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: deque[str] = deque(maxlen=self.MAX_LINES)
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in iter(lambda: stream.readline(4096), b""):
            self.lines.append(raw.decode(errors="replace").rstrip())

    def last(self, n: int = 1) -> list[str]:
        """The last n non-empty lines (after the process closed its output, or a second's wait)."""
        self._thread.join(timeout=1)
        return [ln for ln in self.lines if ln.strip()][-n:]


def become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _stat_field(pid: int | str, index: int) -> int | None:
    """A number from /proc/PID/stat, counted after the command name (1: parent pid, 3: session id);
    None once the process is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[index])
    except (OSError, IndexError, ValueError):
        return None


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process this host's /proc shows."""
    parents = {int(d.name): _stat_field(d.name, 1) for d in Path("/proc").iterdir() if d.name.isdigit()}
    return {pid: parent for pid, parent in parents.items() if parent is not None}


def session_of(pid: int) -> int | None:
    """The session id of pid, None once it is gone."""
    return _stat_field(pid, 3)


def children(of: int | None = None) -> list[int]:
    """The live children of this process (adopted orphans included), or of pid `of`, from /proc."""
    me = os.getpid() if of is None else of
    return [pid for pid, parent in _parents().items() if parent == me]


def descendants(pid: int) -> list[int]:
    """pid and everything below it (a sandboxed worker: bwrap, then its namespace's processes)."""
    parents, out, todo = _parents(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, parent in parents.items() if parent == p]
    return out


def signal_tree(pid: int, sig: int) -> None:
    """Send sig to pid and every descendant, in rounds until none is new (a fork can race one
    sweep): used to stop a worker while another one is timed (SIGSTOP), then to wake it (SIGCONT),
    only where the kernel's freezer cannot be had (harness/sandbox/cgroup.py): a chain of processes that
    fork and exit outruns it (tests/cheaters/hops_while_frozen.py: about 40 steps a second here)."""
    done: set[int] = set()
    for _ in range(KILL_ROUNDS):
        new = [p for p in descendants(pid) if p not in done]
        if not new:
            return
        for p in new:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        done.update(new)


def _kill(pids: Iterable[int]) -> None:
    pids = list(pids)
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    cgroup_make.thaw_processes(pids)  # a paused worker dies only once thawed: else the wait below never ends
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def kill_tree(proc: subprocess.Popen, spare: Collection[int] = ()) -> None:
    """Kill a process, its process group and every orphan this process adopted from it: every child
    of this process but those of the sessions in `spare` (workers still in use, each the leader of
    a session of its own, and the orphans it left: harness/measure/alternate.py's rival)."""
    for _ in range(KILL_ROUNDS):
        victims = ([proc.pid] if proc.poll() is None else []) + \
            [p for p in children() if p != proc.pid and session_of(p) not in spare]
        if not victims:
            return
        _kill(victims)
        proc.poll()


def kill_orphans(spare: set[int]) -> None:
    """Kill every child of this process but those in `spare` (a wave's live members)."""
    _kill(pid for pid in children() if pid not in spare)
