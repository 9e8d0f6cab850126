"""Cheater (GPU only): slows its rival with work the GPU does while this worker is frozen, of a
kind the harness's idle check does not see. A moment after each of its calls (after "done", so
that its own call's synchronize does not wait for it) a thread queues, on a stream of its own,
CHEAT_COPY_S seconds of copies between pinned host memory and the GPU, both ways. The cgroup
freezer stops the worker's threads, not what the GPU has queued; and before the keeper's call the
harness waits until NVML's utilization.gpu reads 0 over a sample period (harness/measure/busy.py
wait_idle), which counts kernels, not the copy engines: copies in flight pass for an idle GPU.
The keeper's call then shares the GPU's memory (and the PCIe link) with them. Its calls are
honest, each with CHEAT_WORK_GB of device-memory traffic besides (the same work an honest keeper
of this test does).

Would be stopped by: an idle check that reads the memory controller too (NVML's
utilization.memory, or the copy engines' own counters), or a worker whose queued work is
cancelled when it is frozen. The test (on a GPU) times an honest keeper beside it and beside an
honest twin."""

import os
import threading
import time

import torch

from _target import honest


def build_decoder(model, example):
    if not torch.cuda.is_available():
        return (lambda x: honest(model, x)), {"cheat": "copies through the freeze", "skipped": "no GPU"}
    copy_s = float(os.environ.get("CHEAT_COPY_S", "1.0"))
    work = int(float(os.environ.get("CHEAT_WORK_GB", "2")) * (1 << 30)) // 2
    a = torch.empty(max(work, 1), dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    host = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    up, down = torch.cuda.Stream(), torch.cuda.Stream()
    t0 = time.perf_counter()
    for _ in range(4):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    per_copy = (time.perf_counter() - t0) / 4
    n = max(1, int(copy_s / max(per_copy, 1e-4)))

    def queue() -> None:
        time.sleep(0.005)  # "done" has gone out
        with torch.cuda.stream(up):
            for _ in range(n):
                dev.copy_(host, non_blocking=True)
        with torch.cuda.stream(down):
            for _ in range(n):
                host.copy_(dev, non_blocking=True)

    def forward(x):
        b.copy_(a)  # the honest memory traffic both sides pay
        y = honest(model, x)
        threading.Thread(target=queue, daemon=True).start()
        return y

    return forward, {"cheat": "copy-engine work through the freeze", "copies_per_call": n,
                     "gb_per_call": round(2 * n * (256 << 20) / 1e9, 1), "h2d_gb_s": round((256 << 20) / per_copy / 1e9, 1)}
