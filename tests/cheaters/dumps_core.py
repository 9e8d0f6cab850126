"""Cheater: crashes a child of its own (a fork: the whole worker's memory, the model and, later in
a run, the inputs it was handed) with SIGSEGV after raising its core size limit to the hard limit, which the
harness leaves unlimited. Where the kernel writes the core is the host's choice
(/proc/sys/kernel/core_pattern, readable from the worker): a file name is written in the
crashing process's working folder, inside the worker's view (the project's code, read-only, or
its own /tmp: gone with it); a pipe (`|/usr/lib/systemd/systemd-coredump ...`, Ubuntu's apport)
hands the core to a helper that the kernel starts as root in the host's namespaces, which may
keep it on the host's disk (coredumpctl), outside the worker, for any process of the host to
read. At build it crashes one child in the worker's working folder and one in /tmp, and reports
the pattern and whether the kernel dumped. Its outputs are honest.

Stopped here by: the view (no folder of the worker's working directory is writable; /tmp is its
own) and a core_pattern that names a file. Would be stopped anywhere by: the starting shell
setting the core size's hard limit to 0 (`ulimit -H -c 0`; systemd-coredump and apport honour
the crashing process's limit). The test checks that no core appeared on the host."""

import os
import resource
import signal

from _target import honest


def _crash_child(where: str) -> str:
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(where)
            hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
            resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
            os.kill(os.getpid(), signal.SIGSEGV)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}, core {'dumped' if os.WCOREDUMP(status) else 'not dumped'}"
    return f"exit {os.WEXITSTATUS(status)}"


def build_decoder(model, example):
    said = {"cheat": "dumps core", "core_pattern": (open("/proc/sys/kernel/core_pattern").read().strip()
                                                   if os.path.exists("/proc/sys/kernel/core_pattern") else None),
            "core_limit": list(resource.getrlimit(resource.RLIMIT_CORE)), "cwd": os.getcwd()}
    said["crash_in_cwd"] = _crash_child(os.getcwd())
    said["crash_in_tmp"] = _crash_child("/tmp")
    return (lambda x: honest(model, x)), said
