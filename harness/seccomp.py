"""A seccomp filter for the worker: the one gap its namespaces and Landlock leave, Unix sockets.

A Unix socket bound at a path on the host (a session bus, a container runtime's socket, an SSH
agent) can be connected to through a read-only mount and across a network namespace, and Landlock
does not govern connecting to one. Behind such a socket a service may run commands outside every
namespace. So the worker may not make a Unix socket at all (socket(AF_UNIX, ...) fails with
EACCES; the channel to the harness is inherited, already made), nor use io_uring (which can make
and connect sockets without the socket system call), nor system calls of another architecture (the
32-bit and x32 ABIs have socket calls of their own numbers).

bubblewrap loads the program (`--seccomp FD`): classic BPF over struct seccomp_data, built here
as bytes. Returns None on an architecture it does not know; the sandbox then runs without it.
"""

from __future__ import annotations

import errno
import platform
import struct

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
_AF_UNIX = 1
# struct seccomp_data: nr at 0, arch at 4, args[0] (its low 32 bits, little-endian) at 16.
_NR, _ARCH, _ARG0 = 0, 4, 16
# (AUDIT_ARCH_*, socket, io_uring_setup) by machine.
_ARCHES = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture, or None where it is not known."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, socket_nr, io_uring_nr = arch
    deny = _op(_RET_K, _ERRNO | errno.EACCES)
    allow = _op(_RET_K, _ALLOW)
    body = [
        _op(_LD_W_ABS, _ARCH),
        _op(_JEQ_K, audit, jt=1),          # a foreign architecture's call: refused
        deny,
        _op(_LD_W_ABS, _NR),
        _op(_JGE_K, _X32_BIT, jt=5),       # x32: refused
        _op(_JEQ_K, io_uring_nr, jt=4),    # io_uring: refused
        _op(_JEQ_K, socket_nr, jf=2),      # not socket(): allowed
        _op(_LD_W_ABS, _ARG0),
        _op(_JEQ_K, _AF_UNIX, jt=1),       # socket(AF_UNIX, ...): refused
        allow,
        deny,
    ]
    return b"".join(body)
