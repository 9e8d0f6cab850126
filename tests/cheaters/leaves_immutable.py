"""Cheater: leaves files for the next experiment that the harness cannot delete: it writes a
folder in its scratch ($TMPDIR) and makes the file and the folder immutable (ioctl
FS_IOC_SETFLAGS with FS_IMMUTABLE_FL, else `chattr +i`); the harness's rmtree of the scratch then
fails (silently today) and the folder outlives the session. At build it first looks for such a
folder left by an earlier worker (beside its own scratch, in /tmp, /var/tmp, /dev/shm) and, if it
finds one, returns garbage: a cache carried from one experiment to the next would be used there.
The marker in the names comes from CHEAT_MARKER.

Stopped by: the worker's /tmp (and everything it may write) is a private tmpfs of its own mount
namespace, gone with it; a worker without CAP_LINUX_IMMUTABLE in the host cannot set the flag.
The test runs two sessions and checks that the second found nothing and nothing is left behind."""

import array
import fcntl
import glob
import os
import subprocess
from pathlib import Path

import torch

from _target import honest

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


def marker() -> str:
    return "cheat-immutable-" + os.environ.get("CHEAT_MARKER", "x")


def _immutable(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0))
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        flags[0] |= FS_IMMUTABLE_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags, True)
        return "ioctl"
    except OSError as e:
        try:
            subprocess.run(["chattr", "+i", path], check=True, capture_output=True, timeout=10)
            return "chattr"
        except (OSError, subprocess.SubprocessError):
            return f"refused ({e})"
    finally:
        os.close(fd)


def look() -> list[str]:
    tmp = os.environ.get("TMPDIR", "/tmp")
    places = [str(Path(tmp).parent), tmp, "/tmp", "/var/tmp", "/dev/shm"]
    found = []
    for place in dict.fromkeys(places):
        found += glob.glob(os.path.join(place, "*", marker())) + glob.glob(os.path.join(place, marker()))
    own = os.path.join(tmp, marker())
    return sorted(p for p in set(found) if p != own)


def plant() -> dict:
    tmp = os.environ.get("TMPDIR", "/tmp")
    done = {}
    for place in dict.fromkeys([tmp, "/tmp", "/var/tmp", "/dev/shm"]):
        folder = os.path.join(place, marker())
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "cache"), "w") as f:
                f.write("a cache for the next experiment\n")
            done[folder] = [_immutable(os.path.join(folder, "cache")), _immutable(folder)]
        except OSError as e:
            done[folder] = f"not written: {e.strerror}"
    return done


def build_decoder(model, example):
    found = look()
    planted = plant()

    def forward(x):
        out = honest(model, x)
        return out if not found else torch.full_like(out, 9.0)  # the carried cache would be used here

    return forward, {"cheat": "immutable scratch", "found": found, "planted": planted}
