"""What the development probes in scripts/ share: loading a candidate file as a module, the model and
benchmark latent a whole decode runs on, timing a GPU function (CUDA events for a kernel, wall time
for a whole decode), and a decode's PSNR."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch


def load_module(path: Path, name: str = "candidate") -> ModuleType:
    """Import a candidate file (optimize.py or a variant) to call its pieces directly."""
    from harness.target.loader import load_source

    return load_source(path, name=name)


BENCHMARK_SHAPE = (1, 48, 31, 44, 80)  # the full preset's latent: 720p x 121 frames


def benchmark_decode(device: str | torch.device = "cuda") -> tuple[Any, torch.Tensor]:
    """The frozen model with synthetic weights and the benchmark shape's seeded latent, on device."""
    from harness import target
    target.use("wan-vae")  # the worked example's packages by name (harness/target/)
    from model import load_vae

    z = torch.randn(*BENCHMARK_SHAPE, generator=torch.Generator().manual_seed(1234))
    return load_vae("synthetic", device=device), z.to(device)


def median_ms(fn: Callable[[], Any], trials: int = 5, reps: int = 1, warmup: int = 1) -> float:
    """Median over `trials` of the mean milliseconds a run of `reps` back-to-back runs takes (CUDA
    events), after `warmup` runs (cudnn.benchmark picks its algorithm on the first)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / reps)
    return statistics.median(times)


def wall_times(fn: Callable[[], Any], runs: int) -> tuple[Any, list[float]]:
    """(the last output, the wall seconds of each of `runs` calls), the GPU synchronized around each."""
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return out, times


def psnr(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(PSNR in dB for values in [-1, 1], max |a - b|)."""
    mse = ((a.double() - b.double()) ** 2).mean().item()
    db = float("inf") if mse == 0 else 10 * torch.log10(torch.tensor(4.0 / mse)).item()
    return db, (a - b).abs().max().item()


def preset_shape(preset: str) -> list[int]:
    """A preset's latent shape from goals.json, the one place the benchmark's shapes are written."""
    from harness import _common

    return list(_common.load_goals()["presets"][preset]["input_shape"])
