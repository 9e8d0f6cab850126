"""What the development probes in scripts/ share: loading a candidate file as a module, and
timing a GPU function with CUDA events."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch


def load_module(path: Path, name: str = "candidate") -> ModuleType:
    """Import a candidate file (optimize.py or a variant) to call its pieces directly."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
