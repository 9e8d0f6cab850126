"""Cheater for a worker group (a preset of several ranks): every rank, under the Landlock rules a
group's ranks get (TCP, abstract unix sockets and signals are left to the namespaces: gloo and
NCCL need them among the ranks), tries to reach the harness: a TCP connection to a port the test
listens on at 127.0.0.1 (CHEAT_PORT), a message on an abstract unix socket it listens on
(CHEAT_ABSTRACT), a key in the host user's keyring (found by serial in /proc/keys, named after
CHEAT_ABSTRACT and the rank), and SIGCONT to every process it may signal (kill(-1): the harness
too, could it be named). Stopped by: the sandbox's network namespace (a loopback and abstract
socket names of its own), its PID namespace (the harness has no PID there), and the seccomp
filter every rank inherits from the sandbox (no keyring calls)."""

import os
import signal
import socket

import torch.distributed as dist
import torch.nn.functional as F  # noqa: F401 (a split decode hooks the candidate's F)

import _keys
from _target import honest


def _reach_out() -> list[str]:
    reached = []
    try:
        with socket.create_connection(("127.0.0.1", int(os.environ["CHEAT_PORT"])), timeout=1) as s:
            reached.append("tcp")  # connected: that is the escape, whatever the send does
            s.sendall(b"tcp")
    except OSError:
        pass
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect("\0" + os.environ["CHEAT_ABSTRACT"])
            reached.append("abstract")
            s.sendall(b"abstract")
    except OSError:
        pass
    name = f"auto-optim-rank-{os.environ['CHEAT_ABSTRACT']}-{dist.get_rank() if dist.is_initialized() else 0}"
    if any(_keys.add(name, b"rank", ring) > 0 for ring in _keys.host_user_keyrings() + [_keys.USER]):
        reached.append("keyring")
    if os.environ.get("CHEAT_SIGNAL", "1") == "1":  # "0" unsandboxed: kill(-1) would reach every process of the user
        try:
            os.kill(-1, signal.SIGCONT)
        except OSError:
            pass
    return reached


def build_decoder(model, example):
    reached = _reach_out()

    def forward(x):
        return honest(model, x)

    return forward, {"cheat": "a rank reaches out", "reached": reached}
