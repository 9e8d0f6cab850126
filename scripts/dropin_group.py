"""The diffusers drop-in given a process group, on the GPUs of one host: what a pipeline run with
torchrun gets from `patch_diffusers_wan(vae, group=dist.group.WORLD)`.

    torchrun --nproc-per-node N scripts/dropin_group.py [--shape 720p] [--runs 5] [--out FILE.md]

On a host without CUDA the ranks are CPU processes over gloo (`--shape tiny`: a smoke run).

Rank 0 first decodes alone (the drop-in without a group: the reference and its time), then every
rank decodes together, the frame split across the ranks (integrations/split_decode.py) and the video
broadcast to all. Figures: the median and range of --runs timed calls after the first, on rank 0's
clock with every rank synchronized at both ends; the first call (build, warm-up, graph capture);
rank 0's peak; PSNR of the split video against the one-GPU one; and whether every rank holds the
same video. Synthetic weights, seeded latent (as scripts/peers.py). Development tool: nothing here
is part of the frozen harness.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from peers import PRESETS, diffusers_vae  # scripts/: the same diffusers module and latent as the peers table
from _probe import preset_shape, psnr
from integrations import wan_dropin
from model import LATENT_MEAN, LATENT_STD, load_vae


SHAPES = {**PRESETS, "tiny": "tiny"}
CUDA = torch.cuda.is_available()


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def timed_calls(decode: Callable[[], torch.Tensor], runs: int, group: bool) -> tuple[float, list[float], torch.Tensor]:
    """(first call s, timed calls s, last video); with group, every rank starts and ends each call together."""
    def one() -> tuple[float, torch.Tensor]:
        sync()
        if group:
            dist.barrier()
        t = time.perf_counter()
        video = decode()
        sync()
        if group:
            dist.barrier()
        return time.perf_counter() - t, video

    first, video = one()
    times = []
    for _ in range(runs):
        del video
        seconds, video = one()
        times.append(seconds)
    return first, times, video


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="720p")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if "LOCAL_RANK" not in os.environ:
        print("dropin_group: run it with torchrun (torchrun --nproc-per-node N scripts/dropin_group.py ...)",
              file=sys.stderr)
        return 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = f"cuda:{os.environ['LOCAL_RANK']}" if CUDA else "cpu"
    if CUDA:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if CUDA else "gloo")
    state = load_vae("synthetic").state_dict()
    z = torch.randn(*preset_shape(SHAPES[args.shape]), generator=torch.Generator().manual_seed(2026))
    shape = (1, -1, 1, 1, 1)
    raw = (z * torch.tensor(LATENT_STD).view(shape) + torch.tensor(LATENT_MEAN).view(shape)).to(device)

    def peak_gb() -> float:
        return torch.cuda.max_memory_allocated() / 1e9 if CUDA else float("nan")

    if rank == 0:
        alone = wan_dropin.patch_diffusers_wan(diffusers_vae(state, torch.float32, device))
        first1, times1, reference = timed_calls(lambda: alone.decode(raw).sample, args.runs, group=False)
        peak1, reference = peak_gb(), reference.cpu()
        del alone
        if CUDA:
            torch.cuda.empty_cache()
    dist.barrier()
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    split = wan_dropin.patch_diffusers_wan(diffusers_vae(state, torch.float32, device), group=dist.group.WORLD)
    first, times, video = timed_calls(lambda: split.decode(raw).sample, args.runs, group=True)
    peak = peak_gb()
    # Every rank got the video: the largest difference of any rank's copy from rank 0's.
    root = video.clone()
    dist.broadcast(root, 0)
    differs = (video - root).abs().max().reshape(1)
    dist.all_reduce(differs, op=dist.ReduceOp.MAX)
    if rank == 0:
        def row(gpus: int, first_s: float, calls: list[float], peak_gb: float, quality: str) -> str:
            return (f"| {gpus} | {statistics.median(calls):.3f} s ({min(calls):.3f}-{max(calls):.3f}) | "
                    f"{first_s:.1f} s | {'-' if peak_gb != peak_gb else f'{peak_gb:.1f} GB'} | {quality} |")

        versions = (f"{torch.cuda.get_device_name()}; torch {torch.__version__}, NCCL "
                    f"{'.'.join(map(str, torch.cuda.nccl.version()))}" if CUDA else f"CPU, gloo; torch {torch.__version__}")
        lines = [f"The diffusers drop-in on {world} rank(s) ({versions}; preset {SHAPES[args.shape]}, synthetic "
                 f"weights, seeded latent; {args.runs} timed calls after the first)", "",
                 "| ranks | median (calls) | first call | peak, rank 0 | PSNR vs 1 rank |", "|---:|---:|---:|---:|---:|",
                 row(1, first1, times1, peak1, "-"),
                 row(world, first, times, peak, f"{psnr(video.cpu(), reference)[0]:.2f} dB"), "",
                 f"Every rank's video against rank 0's: largest difference {differs.item():.3g}."]
        text = "\n".join(lines)
        print(text)
        if args.out:
            args.out.write_text(text + "\n")
    dist.barrier()
    # No destroy_process_group: once NCCL work was captured in a CUDA graph it can hang (pytorch/pytorch#115388;
    # this script's first run on 2 H200s printed its table and hung there). The communicators end with the process.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
