"""Landlock for the candidate's worker: the second wall, inside the namespaces of harness/sandbox/boundary.py.

Landlock (Linux 5.13+) lets an unprivileged process restrict itself and every process it starts
afterwards; a restriction can never be lifted. The worker calls `restrict()` as its first act,
before it imports torch or the candidate, while it has a single thread (Landlock binds the calling
thread and what it creates later).

The policy is the sandbox's own allow-list (harness/sandbox/boundary.py Policy.readable): the worker may
read and execute only the folders and files its view shows (the system's, the interpreter's, the
harness's, the target's code and assets, its candidate's helpers, /proc and /dev), list the
project folders that view shows only in part, write only under `writable` (its scratch folder,
device files other than /dev/shm), and never read the `hidden` paths (the benchmark input, the
references, the pool of fresh inputs, the key that signs records), even inside a readable folder.
Where the kernel supports it (ABI 4 and 6), it opens no TCP connection, sends no signal and reaches
no abstract unix socket outside its own domain (the ranks of a worker group: see restrict).
Landlock also forbids ptrace of processes outside the domain, so /proc/<harness>/mem and friends
are closed whatever the view shows.

A readable folder that holds a hidden path is granted listing only and descended into, and each
entry but the hidden one is granted on its own. Files created later inside a descended folder
are not covered, so they stay unreadable: a safe default.

We use the syscalls through ctypes (three calls and two structs) rather than a package: the
maintained Python bindings we found are thin wrappers of the same calls, and the worker must
apply this before importing anything large.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from pathlib import Path

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same on every Linux architecture
_PR_SET_NO_NEW_PRIVS = 38
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# Filesystem access rights (linux/landlock.h) and the ABI that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_TCP = 0b11          # bind and connect (ABI 4)
_SCOPE = 0b11            # abstract unix sockets and signals outside the domain (ABI 6)

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
         | MAKE_SYM | REFER | TRUNCATE | IOCTL_DEV)
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # rights a rule on a file may hold


class Unavailable(Exception):
    """This kernel (or OS) cannot sandbox the worker."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI (0 when there is none: not Linux, too old, or disabled)."""
    if platform.system() != "Linux":
        return 0
    v = _libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(v), 0)


def _holds(top: str, hidden: set[str]) -> bool:
    return any(h == top or h.startswith(top.rstrip("/") + "/") for h in hidden)


def _grants(hidden: set[str], top: str) -> list[tuple[str, bool, int]]:
    """(path, is_dir, access) rules that cover everything under `top` except `hidden` (real paths)."""
    if top in hidden:
        return []
    if not _holds(top, hidden):
        return [(top, os.path.isdir(top), READ)]
    try:
        names = os.listdir(top)
    except OSError:
        return []
    # A folder on the way to a hidden path may still be listed (Python's importer lists every
    # sys.path folder); names are not contents, and READ_FILE stays per entry.
    out = [(top, True, READ_DIR)]
    for name in names:
        path = os.path.join(top, name)
        if os.path.islink(path) and _holds(os.path.realpath(path), hidden):
            continue  # a shortcut to (a folder holding) something hidden: its real path is walked anyway
        out += _grants(hidden, path)
    return out


def restrict(readable: list[str | Path], listable: list[str | Path], hidden: list[str | Path],
             writable: list[str | Path], group: bool = False) -> int:
    """Sandbox this thread and everything it starts from now on. Returns the ABI used.

    readable: what it may read and execute (files or folders); listable: folders whose entries it
    may list, no more (Python's importer lists every sys.path folder); hidden: paths it may never
    read, even inside a readable folder; writable: folders it may write in.
    group: a rank of a worker group (harness/worker/worker_group.py), each under a domain of its own,
    which talk over TCP (gloo, NCCL's bootstrap: on ports the kernel picks, which no rule can
    name), abstract unix sockets (NCCL) and signals: those are left to the sandbox's network and
    PID namespaces, which hold the group's own processes only.
    Raises Unavailable when Landlock is missing; any other failure raises OSError.
    """
    abi = abi_version()
    if abi <= 0:
        raise Unavailable("Landlock is not available on this kernel (Linux 5.13+ with landlock in the LSM list)")
    libc = _libc()
    fs = _FS_BY_ABI.get(abi, _FS_BY_ABI[5])
    net = _NET_TCP if abi >= 4 and not group else 0
    scope = _SCOPE if abi >= 6 and not group else 0
    attr = struct.pack("=QQQ", fs, net, scope)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = libc.syscall(_SYS_CREATE, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        real_hidden = {os.path.realpath(p) for p in hidden}
        rules = [rule for top in readable for rule in _grants(real_hidden, os.path.normpath(str(top)))]
        rules += [(str(p), True, READ_DIR) for p in listable if os.path.isdir(p)]
        for w in writable:
            rules.append((str(w), os.path.isdir(w), READ | WRITE))
        for path, is_dir, access in rules:
            _add_rule(libc, ruleset, path, (access if is_dir else access & _FILE_ONLY) & fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_SYS_RESTRICT, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # vanished (a process that exited, a temp file): nothing to grant
    try:
        rule = struct.pack("=Qi", access, fd)  # struct landlock_path_beneath_attr is packed
        if libc.syscall(_SYS_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
    finally:
        os.close(fd)
