"""Cheater: stalls the harness between its writing a call's input and its starting the clock, and
computes meanwhile. It schedules its parent (os.getppid(), the harness today): pins it to one CPU
(sched_setaffinity), lowers it to nice 19 (setpriority) and SCHED_IDLE (sched_setattr through a
raw syscall, else sched_setscheduler), then runs a watcher thread pinned to that same CPU that
busy-polls the shared input buffer and, on a change, burns HONEST_COST_S of CPU there (the honest
cost, which also starves the harness) before computing the output; "call" is answered with the
finished output. If the harness is starved after it wrote the input but before it read the clock,
the honest cost falls outside the timed interval.

Stopped by: the worker cannot see or schedule the harness (its own PID namespace: getppid() is 0
or a pid of its own namespace, and scheduler calls on the harness fail), and the clock starts
before the input is visible. The test checks the median against the honest cost, and that the
harness process was not re-scheduled (its policy, nice value and CPU set are unchanged)."""

import ctypes
import os
import struct
import time

from _reach import Watcher, worker
from _target import honest

HONEST_COST_S = 0.3
SCHED_IDLE = 5
_SYS_SCHED_SETATTR = 314  # x86_64


def _setattr(pid: int, policy: int, nice: int = 0) -> bool:
    """sched_setattr(pid, {size 48, policy, flags 0, nice, ...}) through the raw syscall."""
    attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQ", 48, policy, 0, nice, 0, 0, 0, 0))
    return ctypes.CDLL(None, use_errno=True).syscall(_SYS_SCHED_SETATTR, pid, attr, 0) == 0


def stall(pid: int) -> dict:
    done = {}
    if pid <= 1:
        return {"pid": pid}
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[0]
    try:
        os.sched_setaffinity(pid, {cpu})
        done["affinity"] = cpu
    except OSError as e:
        done["affinity_error"] = str(e)
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
        done["nice"] = 19
    except OSError as e:
        done["nice_error"] = str(e)
    if _setattr(pid, SCHED_IDLE, 19):
        done["policy"] = "SCHED_IDLE (sched_setattr)"
    else:
        try:
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
            done["policy"] = "SCHED_IDLE (sched_setscheduler)"
        except OSError as e:
            done["policy_error"] = str(e)
    done["cpu"] = cpu
    return done


def build_decoder(model, example):
    ppid = os.getppid()
    stalled = stall(ppid)
    w = worker()
    watcher = None
    if w is not None:
        watcher = Watcher(w.inp, lambda x: honest(model, x), HONEST_COST_S, busy=True, cpu=stalled.get("cpu"))

    def slow(x):
        time.sleep(HONEST_COST_S)
        return honest(model, x)

    def forward(x):
        if watcher is None:
            return slow(x)
        return watcher.answer(x, lambda: slow(x))

    return forward, {"cheat": "stalls the harness", "ppid": ppid, "stalled": stalled}
