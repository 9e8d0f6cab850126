"""Cheater: a chain of processes that fork and exit, each taking CPU for a moment, started at
build and kept running: while its worker is paused so that its rival (the keeper) is timed alone
(harness/measure/alternate.py), the chain slows the rival and makes this candidate look faster. A pause
by signals (SIGSTOP to every process found in /proc, in rounds) does not catch a chain whose
members live a millisecond each: the issue saw one run in 318 samples while its worker was
"stopped". Each member adds one to a counter kept in the worker's /tmp (CHEAT_MARKER names it),
which the test reads from the host (/proc/PID/root). Its calls are honest.

Stopped by: the kernel's cgroup freezer (harness/sandbox/cgroup.py): every task of the worker's cgroup
is frozen, and one forked meanwhile is born frozen. The test pauses the worker and checks that
the counter does not move until it is resumed."""

import ctypes
import os
import time

from _target import honest

PR_SET_CHILD_SUBREAPER = 36
SPIN_S = 0.0005  # each member's share of CPU before it forks the next and exits


def _chain(path: str) -> None:
    """A member: take some CPU, count, fork the next member, exit (the first one forever)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    while True:
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            pass
        count = int(os.pread(fd, 32, 0) or b"0")
        os.pwrite(fd, b"%-31d" % (count + 1), 0)
        if os.fork():
            os._exit(0)


def _reaper(path: str) -> None:
    """The chain's origin: it adopts the members that exit (a subreaper) and reaps them, so the
    chain leaves no zombies behind."""
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if os.fork() == 0:
        _chain(path)
    while True:
        os.wait()


def build_decoder(model, example):
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"hopper-{os.environ.get('CHEAT_MARKER', 'x')}")
    if os.fork() == 0:  # only os calls from here on (the worker has threads)
        try:
            os.setsid()
            _reaper(path)
        finally:
            os._exit(0)

    def forward(x):
        return honest(model, x)

    return forward, {"cheat": "a fork-and-exit chain that runs while its worker is paused", "counter": path}
