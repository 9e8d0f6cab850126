"""A seccomp filter for the worker: no io_uring, no system calls of another architecture.

Both are ways around the rest of the sandbox's rules: io_uring performs file and socket operations
without the system calls a filter or an audit sees, and the 32-bit and x32 ABIs of an x86-64
kernel have socket calls of their own numbers. The worker needs neither. (Unix sockets at host
paths are kept out by the mount view, harness/sandbox.py: the CUDA driver itself makes Unix
sockets, so socket(AF_UNIX) cannot be refused; seen on an H100, error 304 at cuInit.)

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
# struct seccomp_data: nr at 0, arch at 4.
_NR, _ARCH = 0, 4
# (AUDIT_ARCH_*, io_uring_setup) by machine.
_ARCHES = {"x86_64": (0xC000003E, 425), "aarch64": (0xC00000B7, 425)}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture, or None where it is not known."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, io_uring_nr = arch
    deny = _op(_RET_K, _ERRNO | errno.EPERM)
    allow = _op(_RET_K, _ALLOW)
    body = [
        _op(_LD_W_ABS, _ARCH),
        _op(_JEQ_K, audit, jt=1),          # a foreign architecture's call: refused
        deny,
        _op(_LD_W_ABS, _NR),
        _op(_JGE_K, _X32_BIT, jt=2),       # x32: refused
        _op(_JEQ_K, io_uring_nr, jt=1),    # io_uring: refused
        allow,
        deny,
    ]
    return b"".join(body)
