"""What the keyring cheaters share: the kernel's key system calls (add_key, keyctl), and the host
user's keyrings as /proc/keys lists them (a user namespace hides the host's `@u`, not its serial
number). The tests use the same calls from the host's side to look for what a cheater left.

Nothing here is an attack by itself; the cheaters that import it are."""

from __future__ import annotations

import ctypes
import os
import platform

_NUMBERS = {"x86_64": (248, 250), "aarch64": (217, 219)}  # (add_key, keyctl)
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_LINK = 0, 1, 8
KEYCTL_SEARCH, KEYCTL_READ, KEYCTL_INVALIDATE = 10, 11, 21
SESSION, USER = -3, -4  # KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING
PAYLOAD_MAX = 32767     # a "user" key's largest payload

_libc = ctypes.CDLL(None, use_errno=True)
_ADD_KEY, _KEYCTL = _NUMBERS.get(platform.machine(), (-1, -1))


def _err(result: int) -> int:
    """result, or -errno when it failed."""
    return result if result >= 0 else -ctypes.get_errno()


def add(description: str, payload: bytes, keyring: int) -> int:
    """The new key's serial, or -errno."""
    return _err(_libc.syscall(_ADD_KEY, b"user", description.encode(), payload, ctypes.c_size_t(len(payload)),
                              ctypes.c_long(keyring)))


def search(keyring: int, description: str) -> int:
    """The serial of a "user" key with this description in keyring (or below it), or -errno."""
    return _err(_libc.syscall(_KEYCTL, KEYCTL_SEARCH, ctypes.c_long(keyring), b"user", description.encode(),
                              ctypes.c_long(0)))


def read(serial: int) -> bytes | None:
    buf = ctypes.create_string_buffer(PAYLOAD_MAX + 1)
    n = _libc.syscall(_KEYCTL, KEYCTL_READ, ctypes.c_long(serial), buf, ctypes.c_size_t(len(buf)))
    return buf.raw[:n] if n >= 0 else None


def link(keyring: int, into: int) -> int:
    """Link keyring into another (0, or -errno): what a process reaches from its own keyrings it
    possesses, and may read; the host user's keyring grants its user the right to link it."""
    return _err(_libc.syscall(_KEYCTL, KEYCTL_LINK, ctypes.c_long(keyring), ctypes.c_long(into)))


def invalidate(serial: int) -> None:
    """Remove a key from every keyring that holds it (a test's clean-up)."""
    _libc.syscall(_KEYCTL, KEYCTL_INVALIDATE, ctypes.c_long(serial))


def join_session(name: str) -> int:
    """Join (make) a session keyring of this name, the user's keyring linked in it (as a login
    session's is: pam_keyinit), so that this process possesses what either holds and may read it.
    The processes started from here on inherit it."""
    serial = _err(_libc.syscall(_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, name.encode()))
    if serial > 0:
        link(USER, SESSION)
    return serial


def keyring_id(spec: int) -> int:
    return _err(_libc.syscall(_KEYCTL, KEYCTL_GET_KEYRING_ID, ctypes.c_long(spec), ctypes.c_long(0)))


def host_user_keyrings() -> list[int]:
    """The serials of every user keyring /proc/keys shows (`_uid.N`): inside a user namespace, the
    host user's is among them, beside the namespace's own."""
    try:
        lines = open("/proc/keys").read().splitlines()
    except OSError:
        return []
    return [int(line.split()[0], 16) for line in lines if " keyring " in line and "_uid." in line and "_uid_ses" not in line]


def keys_named(prefix: str) -> list[tuple[int, str]]:
    """(serial, description) of every key /proc/keys shows whose description starts with prefix."""
    found = []
    try:
        lines = open("/proc/keys").read().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split(None, 8)
        if len(fields) == 9 and fields[8].startswith(prefix):
            found.append((int(fields[0], 16), fields[8].split(":")[0]))
    return found


def errno_name(result: int) -> str:
    return "ok" if result >= 0 else os.strerror(-result)
