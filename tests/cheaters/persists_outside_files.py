"""Cheater: carries state from one experiment to the next through kernel objects that are not
files, so no folder clean-up and no Landlock rule touches them: a System V shared memory segment
(shmget with IPC_CREAT, under a key derived from CHEAT_MARKER; it outlives every process until
someone removes it) and a key in the user's keyring (add_key into @u, shared by every process of
the user). At build it first looks for both (left by an earlier worker) and, if it finds either,
returns garbage: a compiled kernel, a cache or a note for the next run would be used there.

Stopped by: the worker's own IPC namespace (its System V objects vanish with it) and user
namespace (its user keyring is not the host user's). The test runs two sessions and checks that
the second found nothing and that neither object is left on the host."""

import ctypes
import hashlib
import os

import torch

from _target import honest

IPC_CREAT, IPC_RMID = 0o1000, 0
SYS_ADD_KEY, SYS_KEYCTL = 248, 250  # x86_64
KEYCTL_SEARCH, KEYCTL_READ = 10, 11
KEY_SPEC_USER_KEYRING = -4
NOTE = b"auto-optim: a cache for the next experiment"


def names() -> tuple[int, bytes]:
    marker = os.environ.get("CHEAT_MARKER", "x")
    return int(hashlib.sha256(marker.encode()).hexdigest()[:7], 16), f"auto-optim-cheat-{marker}".encode()


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    libc.shmdt.argtypes = [ctypes.c_void_p]
    return libc


def look() -> dict:
    libc, (key, desc) = _libc(), names()
    found = {}
    shm = libc.shmget(key, 0, 0)
    if shm >= 0:
        ptr = libc.shmat(shm, None, 0)
        if ptr not in (None, ctypes.c_void_p(-1).value):
            found["sysv_shm"] = ctypes.string_at(ptr, len(NOTE)).decode(errors="replace")
            libc.shmdt(ptr)
        else:
            found["sysv_shm"] = f"segment {shm} exists"
    serial = libc.syscall(SYS_KEYCTL, KEYCTL_SEARCH, ctypes.c_long(KEY_SPEC_USER_KEYRING), b"user", desc, 0)
    if serial > 0:
        buf = ctypes.create_string_buffer(256)
        n = libc.syscall(SYS_KEYCTL, KEYCTL_READ, ctypes.c_long(serial), buf, 256)
        found["keyring"] = buf.raw[: max(n, 0)].decode(errors="replace")
    return found


def plant() -> dict:
    libc, (key, desc) = _libc(), names()
    done = {}
    shm = libc.shmget(key, 4096, IPC_CREAT | 0o600)
    if shm >= 0:
        ptr = libc.shmat(shm, None, 0)
        if ptr not in (None, ctypes.c_void_p(-1).value):
            ctypes.memmove(ptr, NOTE, len(NOTE))
            libc.shmdt(ptr)
        done["sysv_shm"] = f"segment {shm} under key {key:#x}"
    else:
        done["sysv_shm"] = f"refused: {os.strerror(ctypes.get_errno())}"
    serial = libc.syscall(SYS_ADD_KEY, b"user", desc, NOTE, len(NOTE), ctypes.c_long(KEY_SPEC_USER_KEYRING))
    done["keyring"] = f"key {serial}" if serial > 0 else f"refused: {os.strerror(ctypes.get_errno())}"
    return done


def build_decoder(model, example):
    found = look()
    planted = plant()

    def forward(x):
        out = honest(model, x)
        return out if not found else torch.full_like(out, 9.0)  # the carried state would be used here

    return forward, {"cheat": "state in SysV IPC and the keyring", "found": found, "planted": planted}
