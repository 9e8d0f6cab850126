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
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
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


@dataclass
class Timing:
    first_s: float       # the first call: build, warm-up, graph capture
    calls_s: list[float]
    peak_gb: float       # nan on CPU

    def row(self, ranks: int, quality: str) -> str:
        c = self.calls_s
        peak = "-" if math.isnan(self.peak_gb) else f"{self.peak_gb:.1f} GB"
        return (f"| {ranks} | {statistics.median(c):.3f} s ({min(c):.3f}-{max(c):.3f}) | {self.first_s:.1f} s | "
                f"{peak} | {quality} |")


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def timed_calls(decode: Callable[[], torch.Tensor], runs: int, together: bool) -> tuple[Timing, torch.Tensor]:
    """decode's first call and `runs` more, timed; together: every rank starts and ends each call at once."""
    if CUDA:
        torch.cuda.reset_peak_memory_stats()

    def one() -> tuple[float, torch.Tensor]:
        sync()
        if together:
            dist.barrier()
        t = time.perf_counter()
        video = decode()
        sync()
        if together:
            dist.barrier()
        return time.perf_counter() - t, video

    first, video = one()
    calls = []
    for _ in range(runs):
        del video
        seconds, video = one()
        calls.append(seconds)
    peak = torch.cuda.max_memory_allocated() / 1e9 if CUDA else math.nan
    return Timing(first, calls, peak), video


def measure(args: argparse.Namespace) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{torch.cuda.current_device()}" if CUDA else "cpu"
    state = load_vae("synthetic").state_dict()
    z = torch.randn(*preset_shape(SHAPES[args.shape]), generator=torch.Generator().manual_seed(2026))
    shape = (1, -1, 1, 1, 1)
    raw = (z * torch.tensor(LATENT_STD).view(shape) + torch.tensor(LATENT_MEAN).view(shape)).to(device)

    if rank == 0:
        alone = wan_dropin.patch_diffusers_wan(diffusers_vae(state, torch.float32, device))
        alone_timing, reference = timed_calls(lambda: alone.decode(raw).sample, args.runs, together=False)
        reference = reference.cpu()
        del alone
        if CUDA:
            torch.cuda.empty_cache()
    dist.barrier()
    split = wan_dropin.patch_diffusers_wan(diffusers_vae(state, torch.float32, device), group=dist.group.WORLD)
    timing, video = timed_calls(lambda: split.decode(raw).sample, args.runs, together=True)
    root = video.clone()
    dist.broadcast(root, 0)
    differs = (video - root).abs().max().reshape(1)
    dist.all_reduce(differs, op=dist.ReduceOp.MAX)
    if rank != 0:
        return
    versions = (f"{torch.cuda.get_device_name()}; torch {torch.__version__}, NCCL "
                f"{'.'.join(map(str, torch.cuda.nccl.version()))}" if CUDA else f"CPU, gloo; torch {torch.__version__}")
    text = "\n".join([
        f"The diffusers drop-in on {world} rank(s) ({versions}; preset {SHAPES[args.shape]}, synthetic weights, "
        f"seeded latent; {args.runs} timed calls after the first)", "",
        "| ranks | median (calls) | first call | peak, rank 0 | PSNR vs 1 rank |", "|---:|---:|---:|---:|---:|",
        alone_timing.row(1, "-"),
        timing.row(world, f"{psnr(video.cpu(), reference)[0]:.2f} dB"), "",
        f"Every rank's video against rank 0's: largest difference {differs.item():.3g}."])
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="720p")
    ap.add_argument("--runs", type=int, default=5, help="timed calls after the first (at least 1)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.out and not args.out.parent.is_dir():
        ap.error(f"--out: no folder {args.out.parent}")
    if "LOCAL_RANK" not in os.environ:
        ap.error("run it with torchrun: torchrun --nproc-per-node N scripts/dropin_group.py ...")
    if CUDA:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if CUDA else "gloo")  # no device_id: as the drop-in's documented use
    code = 0
    try:
        measure(args)
        dist.barrier()
    except Exception:  # noqa: BLE001 - any failure: say it, then end as below
        traceback.print_exc()
        code = 1
    # No destroy_process_group, and no interpreter shutdown: once NCCL work was captured in a CUDA graph,
    # either can hang (pytorch/pytorch#115388; this script's first run on 2 H200s hung at its end, in one
    # or the other). A failed rank ends too, so that torchrun tears the others down.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
