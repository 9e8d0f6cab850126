"""A started worker process (harness/worker/main.py) as the session sees it: what it is given (one
boundary.Policy, harness/sandbox/worker_policy.py: its view of the files, what it may write, its environment, its GPUs), the cgroup
it runs in (harness/sandbox/cgroup.py: a freezer and a memory bound), and the request/reply channel with
timeouts, with a teardown that leaves nothing running. The measuring logic is harness/measure/session.py's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from harness.sandbox import boundary, cgroup, cgroup_make
from harness import replies
from harness.measure.channel import Channel, ChannelClosed
from harness.measure.process import Tail, become_subreaper, kill_tree, signal_tree

HARNESS = Path(__file__).resolve().parents[1]


LIVE: set[int] = set()  # this process's workers not yet closed: their pids, each its session's id


class Failed(Exception):
    """The candidate failed: `status` is gate_fail, crash or timeout; the message is one line."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(replies.one_line(reason, 500))
        self.status = status


class WorkerProcess:
    """A started worker: request/reply with timeouts, and a teardown that leaves nothing running."""

    def __init__(self, cfg: dict[str, Any], buffer_fds: list[int], policy: boundary.Policy, sandboxed: bool,
                 timeouts: dict[str, float], memory_bytes: int | None = None, tasks: int | None = cgroup.DEFAULT_TASKS) -> None:
        become_subreaper()
        self.timeouts = timeouts
        parent, child = socket.socketpair()
        fds = [child.fileno(), *buffer_fds]  # the worker moves them to 3, 4, 5 (worker.settle_fds)
        argv = worker_command(*fds)
        argv, extra = boundary.wrap(argv, policy) if sandboxed else (argv, [])
        self.cgroup, self.cgroup_note = cgroup_make.make(memory_bytes, tasks)
        try:
            self.proc = subprocess.Popen(
                cgroup.entering(self.cgroup, argv), cwd=HARNESS.parent, env=dict(policy.env), pass_fds=[*fds, *extra],
                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        finally:
            child.close()
            for fd in extra:
                os.close(fd)
        self.tail = Tail(self.proc.stdout)
        self.chan = Channel(parent)
        self.hung = False  # it let a request time out: it is not listening for "exit"
        try:
            self.chan.send(cfg)
        except ChannelClosed as e:  # it never started: bwrap's own output says why
            why = self.death(str(e))
            if self.cgroup is not None:
                self.cgroup.remove()
            raise Failed("crash", why) from None
        LIVE.add(self.proc.pid)  # only once started: one that failed to start is not spared

    def request(self, op: str, timeout: float) -> dict[str, Any]:
        self.chan.send({"op": op})
        return self.reply(op, timeout)

    def reply(self, op: str, timeout: float) -> dict[str, Any]:
        try:
            msg = self.chan.recv(timeout)
        except TimeoutError:
            self.hung = True
            raise Failed("timeout", f"worker gave no answer to '{op}' within {timeout:.0f} s") from None
        except ChannelClosed as e:
            raise Failed("crash", self.death(str(e))) from None
        if msg.get("op") == "error":
            raise Failed("crash", str(msg.get("reason", "worker error")))
        if msg.get("op") != ("ready" if op == "start" else "done"):
            raise Failed("crash", f"the worker answered '{op}' with {replies.one_line(repr(msg.get('op')), 40)}")
        return msg

    def death(self, why: str) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"worker stopped talking ({why})"
        signal_nr = -code if code < 0 else code - 128 if code > 128 else 0  # bwrap reports a signal as 128 + n
        how = f"killed by signal {signal_nr}" + (" (out of memory?)" if signal_nr == 9 else "") if signal_nr \
            else f"exited with code {code}"
        if self.cgroup is not None and self.cgroup.oom_kills():
            bound = self.cgroup.memory_bytes or 0
            how = (f"killed by the kernel at its memory bound of {bound / cgroup.GB:.3g} GB (out of memory in its "
                   f"cgroup; goals.json worker_memory_gb sets the bound)")
        if self.cgroup is not None and self.cgroup.tasks_refused():
            how += (f" (the kernel refused {self.cgroup.tasks_refused()} of its forks at its bound of {self.cgroup.tasks_max} "
                    "tasks; goals.json worker_tasks sets the bound)")
        last = " | ".join(self.tail.last(3))
        return f"worker {how}" + (f": {last}" if last else "")

    def freeze(self) -> str | None:
        """Stop every process of the worker (while another worker is timed: harness/measure/alternate.py):
        the kernel's freezer where the worker has a cgroup with one, else SIGSTOP to its tree
        (which a fork-and-exit process can outrun). None once stopped, else why not."""
        if self.cgroup is not None and self.cgroup.freezer is not None:
            if self.cgroup.freeze():
                return None
            return f"the kernel could not freeze the worker within {cgroup.FREEZE_WAIT_S:.0f} s"
        signal_tree(self.proc.pid, signal.SIGSTOP)
        return None

    def thaw(self) -> None:
        if self.cgroup is not None and self.cgroup.freezer is not None:
            self.cgroup.thaw()
        else:
            signal_tree(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        try:
            if not self.hung:  # a hung one would only run out the 5 s before it is killed
                self.chan.send({"op": "exit"})
                self.proc.wait(timeout=5)
        except (ChannelClosed, subprocess.TimeoutExpired):
            pass
        LIVE.discard(self.proc.pid)
        kill_tree(self.proc, spare=LIVE)  # a rival worker beside this one lives on
        if self.cgroup is not None:
            self.cgroup.remove()  # and whatever of it is left, however it was re-parented
        self.chan.sock.close()


def worker_command(*args: int | str) -> list[str]:
    """The worker's command line: an isolated interpreter that runs harness/worker/main.py by path
    (harness/worker/main.py command, which its own restart uses too)."""
    from harness.worker.main import command

    return command(*args)
