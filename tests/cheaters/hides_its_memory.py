"""Cheater: needs 6 GB of GPU memory a call but reports almost none. Each call allocates its
scratch, then frees it to the driver and resets the allocator's peak counter, so the worker's own
figure (max_memory_allocated, facts["peak_mem_gb"]) reads what the call keeps: nothing. Stopped
by: a memory clause measured by the harness (harness/measure/memory_limit.py holds all but N GB of the
GPU): the allocation fails inside N < 6 GB, whatever the counter says."""

import torch

from _target import honest

SCRATCH_BYTES = 6 << 30


def build_decoder(model, example):
    def forward(x):
        scratch = torch.empty(SCRATCH_BYTES, dtype=torch.uint8, device=x.device)
        scratch[:: 1 << 20].fill_(1)  # used, not only reserved
        out = honest(model, x)
        del scratch
        if x.is_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        return out

    return forward, {"cheat": "hides its memory"}
