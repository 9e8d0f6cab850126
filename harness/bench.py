"""Time the candidate's forward pass: warm-up apart, N timed runs, median and spread.

Usage:
    python harness/bench.py [--preset P] [--candidate FILE] [--device cpu|cuda] [--runs N] [--baseline]

--baseline also times the frozen model's eager forward in fp32 (PyTorch defaults) and in bf16
(weights and input cast to bf16, output back to fp32) in this same process, BEFORE the candidate
is imported (a candidate may monkeypatch torch or the model), and reports speedups as ratios of
medians measured in one run.

Output: human lines, `key: value` lines, one final JSON line (see _common.emit).
Exit: 0 measured, 1 the candidate crashed, 2 broken setup.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import _common as C  # noqa: E402

MIN_RUNS = 5


def time_runs(fn: Callable[[], Any], runs: int, device: str) -> list[float]:
    """Seconds per call, each call bracketed by a device sync (CUDA events on GPU)."""
    times: list[float] = []
    for _ in range(runs):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1000.0)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times


def stats(times: list[float]) -> dict[str, float]:
    med = statistics.median(times)
    return {
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "mad_s": statistics.median(abs(t - med) for t in times),
        # The full range of the runs: run_experiment demands a win larger than this.
        "spread_s": max(times) - min(times),
    }


def load_input(goals: dict[str, Any], adapter: Any, preset: str, device: str) -> tuple[torch.Tensor, str]:
    """The benchmark input asset, or a seeded one from the adapter when the asset is missing."""
    path = C.input_path(preset)
    if path.is_file():
        x = C.load_asset(path, "input")["input"]
        return x.to(device), f"asset {path.name}"
    shape = goals["presets"][preset]["input_shape"]
    x = adapter.make_input(shape, goals["input_seed"], device=device)
    return x, f"seeded (input_seed {goals['input_seed']}; {path.name} missing)"


def time_baselines(adapter: Any, model: torch.nn.Module, x: torch.Tensor, runs: int, warmup: int,
                   device: str) -> dict[str, float]:
    """The frozen model's eager forward in fp32 (PyTorch defaults) and with bf16 weights+input."""
    with torch.no_grad():
        for _ in range(warmup):
            adapter.reference(model, x)
        fp32 = stats(time_runs(lambda: adapter.reference(model, x), runs, device))["median_s"]
        m16 = copy.deepcopy(model).to(torch.bfloat16)
        x16 = x.to(torch.bfloat16)
        for _ in range(warmup):
            adapter.reference(m16, x16).float()
        bf16 = stats(time_runs(lambda: adapter.reference(m16, x16).float(), runs, device))["median_s"]
        del m16, x16
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"fp32_eager_s": fp32, "bf16_eager_s": bf16}


def measure(candidate: Path | None = None, preset: str | None = None, device: str | None = None,
            runs: int | None = None, baseline: bool = False, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """Benchmark one candidate; `model` lets a caller (tests) reuse an already loaded frozen model."""
    goals = C.load_goals()
    adapter = C.load_adapter(goals)
    device = device or C.default_device()
    preset = C.pick_preset(goals, preset, device)
    cfg = goals["presets"][preset]
    candidate = Path(candidate) if candidate else C.root() / goals["candidate"]
    if not candidate.is_file():
        raise C.SetupError(f"candidate file not found: {candidate}")
    runs = runs or max(MIN_RUNS, int(cfg.get("timed_runs", MIN_RUNS)))
    warmup = max(1, int(cfg.get("warmup_runs", 1)))

    facts: dict[str, Any] = {"preset": preset, **C.env_info(device), "runs": runs,
                             "candidate": str(candidate)}
    x, facts["input"] = load_input(goals, adapter, preset, device)
    if model is None:
        model = adapter.load_model(device)
    facts["weights_kind"] = adapter.weights_kind() if hasattr(adapter, "weights_kind") else "unknown"

    if baseline:  # before the candidate is imported: it may patch torch or the model
        b = time_baselines(adapter, model, x, runs, warmup, device)
        facts["baseline"] = b

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    build, facts["candidate_sha"] = C.load_candidate(candidate, goals)
    t0 = time.perf_counter()
    with torch.no_grad():
        fn, info = build(model, x.clone())
    C.sync(device)
    facts["build_s"] = time.perf_counter() - t0
    facts["info"] = info

    def call() -> Any:
        with torch.no_grad():
            return fn(x)

    t0 = time.perf_counter()
    for _ in range(warmup):  # first calls: torch.compile, cuDNN autotuning, CUDA graph capture
        call()
    C.sync(device)
    facts["first_calls_s"] = time.perf_counter() - t0
    facts["warmup_s"] = facts["build_s"] + facts["first_calls_s"]

    times = time_runs(call, runs, device)
    facts.update(stats(times))
    facts["times_s"] = times
    facts["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else "not measured"

    flops = float(adapter.flops(list(x.shape))) if hasattr(adapter, "flops") else None
    facts["flops"] = flops
    rate = goals.get("floor", {}).get("rate_tflops")
    facts["tflops"] = flops / facts["median_s"] / 1e12 if flops else None
    facts["floor_s"] = flops / (rate * 1e12) if flops and rate else None
    facts["pct_of_floor"] = 100.0 * facts["floor_s"] / facts["median_s"] if facts["floor_s"] else None

    if baseline:
        b = facts["baseline"]
        b["speedup_vs_fp32"] = b["fp32_eager_s"] / facts["median_s"]
        b["speedup_vs_bf16"] = b["bf16_eager_s"] / facts["median_s"]
    return facts


def human(f: dict[str, Any]) -> list[str]:
    lines = [
        f"bench {Path(f['candidate']).name} [{f['preset']}] on {f['gpu']} "
        f"(torch {f['torch']}, CUDA {f['cuda']}, cuDNN {f['cudnn']}); input: {f['input']}",
        f"  warm-up {f['warmup_s']:.3f} s (build {f['build_s']:.3f} s + first calls {f['first_calls_s']:.3f} s), not timed",
        f"  {f['runs']} runs: median {f['median_s']:.4f} s  min {f['min_s']:.4f}  max {f['max_s']:.4f}  MAD {f['mad_s']:.4f}",
        "  peak memory: " + (f["peak_mem_gb"] if isinstance(f["peak_mem_gb"], str) else f"{f['peak_mem_gb']:.2f} GB"),
    ]
    if f.get("flops"):
        lines.append(f"  {f['flops'] / 1e12:.2f} TFLOP -> {f['tflops']:.2f} TFLOP/s; floor {f['floor_s']:.4f} s "
                     f"(at the goals' rate); {f['pct_of_floor']:.1f}% of floor")
    if "baseline" in f:
        b = f["baseline"]
        lines.append(f"  baselines (same process): fp32 eager {b['fp32_eager_s']:.4f} s "
                     f"(x{b['speedup_vs_fp32']:.2f}), bf16 eager {b['bf16_eager_s']:.4f} s (x{b['speedup_vs_bf16']:.2f})")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset")
    p.add_argument("--candidate", type=Path)
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--runs", type=int, help=f"timed runs (at least {MIN_RUNS}; default: the preset's)")
    p.add_argument("--baseline", action="store_true", help="also time fp32 and bf16 eager in this process")
    a = p.parse_args(argv)
    if a.runs is not None and a.runs < MIN_RUNS:
        print(f"bench: --runs must be at least {MIN_RUNS}", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    try:
        facts = measure(a.candidate, a.preset, a.device, a.runs, a.baseline)
    except C.SetupError as e:
        print(f"bench: broken setup: {e}", file=sys.stderr)
        C.emit([f"FAILED (setup): {e}"], {"ok": False, "reason": f"setup: {e}", "median_s": None})
        return 2
    except Exception as e:  # noqa: BLE001 - the candidate may raise anything
        traceback.print_exc()
        reason = f"candidate crashed: {type(e).__name__}: {e}".splitlines()[0]
        C.emit([f"FAILED: {reason}"], {"ok": False, "reason": reason, "median_s": None})
        return 1
    facts["ok"] = True
    C.emit(human(facts), facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
