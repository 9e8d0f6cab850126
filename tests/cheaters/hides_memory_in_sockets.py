"""Cheater: holds memory where no process's resident set shows it and where a memory bound might
not look: in the kernel's buffers of Unix sockets (socket pairs, each filled until a send would
block, CHEAT_HOG_GB in all). The memory is the kernel's, not the worker's address space; a memory
cgroup that counted only pages, memfds and tmpfs would let a worker hold any amount of the host's
memory there, and the host's OOM killer, which ranks processes by their own pages, would not look
at it first. Its outputs are honest (it never gets to answer if the bound holds).

Stopped by: the memory cgroup charges socket buffers (kernel memory) to the worker that allocates
them (seen here on a cgroup v1 host: killed at its bound); the row says it was killed at its
memory bound. The test runs it with a bound below what it takes."""

import os
import resource
import socket

from _target import honest


def build_decoder(model, example):
    want = float(os.environ.get("CHEAT_HOG_GB", "2")) * 1e9
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held, pairs, chunk = 0, [], b"x" * 65536
    while held < want:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        a.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
        try:
            while True:
                held += a.send(chunk)
        except BlockingIOError:
            pass
        pairs.append((a, b))
    return (lambda x: honest(model, x)), {"cheat": "memory in socket buffers", "held_gb": round(held / 1e9, 2),
                                          "pairs": len(pairs)}
