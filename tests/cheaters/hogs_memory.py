"""Cheater: takes far more of the host's memory than any decode needs, where no OOM score shows
it: CHEAT_HOG="anon" in its own address space (a process the OOM killer would pick, were it not
for the harness beside it with more), "shmem" in memfds and files in its /tmp (pages of shared
memory, in no process's resident set, which the OOM killer does not weigh). CHEAT_HOG_GB says
how much, in 64 MiB steps, at build. Run beside the harness on a host without a bound, it takes
the harness's memory (and the agent's, and a rival worker's) or gets the harness killed in its
place. Its calls are honest, so without a bound it passes.

Stopped by: the memory bound of the worker's cgroup (harness/sandbox/cgroup.py, goals.json
"worker_memory_gb"), which counts every process, memfd and tmpfs page of the worker: past it the
kernel kills inside that cgroup, so the worker dies and the row says why."""

import mmap
import os

from _target import honest

STEP = 64 << 20


def _anon(total: int) -> list:
    held = []
    for _ in range(total // STEP):
        m = mmap.mmap(-1, STEP)
        m[::4096] = b"\x01" * (STEP // 4096)  # touch every page: resident, charged
        held.append(m)
    return held


def _shmem(total: int) -> list:
    held, chunk = [], b"\x01" * STEP
    scratch = os.environ.get("TMPDIR", "/tmp")
    for k in range(total // STEP):
        if k % 2 == 0:
            fd = os.memfd_create(f"hog-{k}")
        else:
            fd = os.open(os.path.join(scratch, f"hog-{k}"), os.O_RDWR | os.O_CREAT, 0o600)
        os.write(fd, chunk)  # pages of shared memory, mapped by no one
        held.append(fd)
    return held


def build_decoder(model, example):
    total = int(float(os.environ.get("CHEAT_HOG_GB", "3")) * 1e9)
    how = os.environ.get("CHEAT_HOG", "anon")
    held = _anon(total) if how == "anon" else _shmem(total)

    def forward(x):
        return honest(model, x)

    forward.held = held  # kept for the worker's life
    return forward, {"cheat": f"holds {total / 1e9:.1f} GB ({how})"}
