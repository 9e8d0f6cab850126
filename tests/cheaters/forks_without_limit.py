"""Cheater: starts processes until the kernel refuses one, up to CHEAT_FORKS (1500 by default:
the test stops there, a real one would not). The worker's cgroup bounds its memory and freezes
it, but nothing bounds its number of tasks: no pids controller, and RLIMIT_NPROC counts the
worker's own user namespace, whose limit is the harness user's (about 96000 here, for root), far
above the host's pid_max (32768 on this machine; each process a PID in every namespace above its
own). A small process costs the memory bound a few hundred kB, so a bound of 40% of the host's
memory allows tens of thousands: the host's PIDs run out, and the harness (which forks git, its
tools, a wave's members), the agent's shell and every other process on the host can no longer
start anything until the worker dies. Each process is a /bin/sleep started with posix_spawn;
all are killed at the end of build. Its outputs are honest.

Would be stopped by: a bound on the worker's tasks set from outside (pids.max in its cgroup, or
RLIMIT_NPROC's hard limit set by the starting shell, which the worker cannot raise). The test
asks for more processes than such a bound would allow and checks that one was refused."""

import os
import signal
import time

from _target import honest


def build_decoder(model, example):
    want = int(os.environ.get("CHEAT_FORKS", "1500"))
    pids, refused = [], None
    t0 = time.perf_counter()
    try:
        for _ in range(want):
            try:
                pids.append(os.posix_spawn("/bin/sleep", ["sleep", "60"], {}))
            except OSError as e:
                refused = os.strerror(e.errno)
                break
    finally:
        spawn_s = time.perf_counter() - t0
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
    return (lambda x: honest(model, x)), {"cheat": "forks without a bound", "started": len(pids), "wanted": want,
                                          "refused": refused, "spawn_s": round(spawn_s, 2)}
