"""A profile of one call, read: the top kernels by GPU time (ops by CPU time on CPU), time by category
(convolution, attention/matmul, norm/elementwise, copy/cat/pad, other), the GPU busy fraction (union
of kernel time / the median call time the harness measured), kernel launches per call, the share of
GPU time outside the largest category, graph breaks when the candidate uses torch.compile, and the
executed FLOPs against the floor (harness/decide/floor.py). The worker captures (capture) and summarizes
(summarize) inside the candidate's own process, so the figures are its claims: they inform, are kept
labelled as claims (facts["claims"]), and are never the metric nor, alone, the stop rule's
(harness/decide/floor.py). run_experiment profiles every keeper in the same worker that timed it; the
person's tool is harness/cli/profile.py (`auto-optim profile`).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import torch

from harness import machine
from harness.replies import CATEGORIES, markdown


# Checked in order: the first entry with a pattern inside the lower-cased name wins.
_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Layout shuffles run by cuDNN are copies even though they belong to a convolution.
    ("copy/cat/pad", ("nchwtonhwc", "nhwctonchw", "convert_layout")),
    # Inductor's generated pointwise / reduction kernels: their names list the ops they fused
    # (an attention's layout op, a copy), but they run pointwise work.
    ("norm/elementwise", ("triton_poi", "triton_red", "triton_per")),
    # Before "cudnn": cuDNN runs attention too (cudnn_generated_fort_native_sdpa_...).
    ("attention/matmul", ("attention", "flash", "fmha", "sdpa", "softmax")),
    ("convolution", ("conv", "fprop", "dgrad", "wgrad", "implicit_gemm", "winograd", "cudnn")),
    ("copy/cat/pad", ("copy", "memcpy", "memset", "cat", "pad", "transpose", "permute",
                      "contiguous", "clone", "fill", "index", "gather", "scatter", "upsample",
                      "repeat", "flip", "stack")),
    # nvjet: cuBLAS's generated GEMM kernels on Hopper (nvjet_sm90_tst_...).
    ("attention/matmul", ("gemm", "gemv", "nvjet", "matmul", "bmm", "addmm", "aten::mm", "aten::linear",
                          "cublas", "cutlass", "triton_tem")),
    ("norm/elementwise", ("norm", "elementwise", "vectorized", "reduce", "silu", "sigmoid", "relu", "gelu",
                          "tanh", "mul", "add", "sub", "div", "clamp", "pow", "sqrt", "rsqrt", "mean", "sum",
                          "exp", "where", "scale")),
)


def classify(name: str) -> str:
    n = name.lower()
    for cat, pats in _PATTERNS:
        if any(p in n for p in pats):
            return cat
    return "other"


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _graph_breaks() -> dict[str, int] | None:
    if "torch._dynamo" not in sys.modules:
        return None
    counters = sys.modules["torch._dynamo"].utils.counters
    graphs = int(counters["stats"].get("unique_graphs", 0))
    breaks = int(sum(counters["graph_break"].values()))
    # The profiler imports dynamo too; only compiled frames say the candidate used torch.compile.
    if graphs == 0 and breaks == 0:
        return None
    return {"graph_breaks": breaks, "unique_graphs": graphs}


@contextlib.contextmanager
def capture(device: str) -> Iterator[Any]:
    """torch.profiler around one call (in the worker)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch_profile(activities=acts) as prof:
        yield prof
        machine.sync(device)


def summarize(prof: Any, device: str, top: int = 15) -> dict[str, Any]:
    """Kernel (or op) times by name and category from a capture; JSON-safe."""
    events = list(prof.events())
    if device == "cuda":  # device-side kernels (and memcpy/memset) by GPU time
        kern = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        dur = {id(e): e.time_range.elapsed_us() for e in kern}
        busy_us = _union_us([(e.time_range.start, e.time_range.end) for e in kern])
        unit = "GPU"
    else:  # CPU: leaf aten ops by self CPU time
        kern = [e for e in events if e.name.startswith("aten::") and e.self_cpu_time_total > 0]
        dur = {id(e): float(e.self_cpu_time_total) for e in kern}
        busy_us = sum(dur.values())
        unit = "CPU"
    per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_cat = {c: 0.0 for c in CATEGORIES}
    for e in kern:
        per_name[e.name][0] += dur[id(e)]
        per_name[e.name][1] += 1
        by_cat[classify(e.name)] += dur[id(e)]
    total_us = sum(by_cat.values()) or 1.0
    top_rows = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "unit": unit, "kernel_time_s": total_us / 1e6, "busy_s": busy_us / 1e6, "launches": len(kern),
        "by_category_s": {c: v / 1e6 for c, v in by_cat.items()},
        "top": [{"name": n, "time_s": t / 1e6, "calls": k, "pct": 100 * t / total_us, "category": classify(n)}
                for n, (t, k) in top_rows],
        "compile": _graph_breaks(),
    }


# The floor counts the FLOPs of both at one peak rate, and a convolution may run as GEMMs (a
# Winograd or im2col form): for the stop rule's "time outside the dominant work" they are one class.
TENSOR_CORE = ("convolution", "attention/matmul")


def dominant(cats: dict[str, float]) -> tuple[str, float]:
    """(name, seconds) of the largest class of kernel time, convolutions and matmuls pooled."""
    pooled = {c: t for c, t in cats.items() if c not in TENSOR_CORE}
    pooled[" + ".join(c for c in TENSOR_CORE if cats.get(c)) or " + ".join(TENSOR_CORE)] = sum(cats.get(c, 0.0) for c in TENSOR_CORE)
    name = max(pooled, key=pooled.get)
    return name, pooled[name]


def claimed(summary: dict[str, Any], wall_s: float | None) -> dict[str, Any]:
    """The figures the stop rule asks of a profile, from the worker's summary: the candidate's
    claims (its worker measured them, and could forge them), labelled as such wherever they are
    kept (facts["claims"]["profile"]). busy_fraction: its kernel time over the call time the
    harness measured; outside_largest: its kernel time outside the largest class."""
    cats = summary["by_category_s"]
    total = sum(cats.values()) or 1.0
    largest, largest_s = dominant(cats)
    return {"busy_fraction": min(1.0, summary["busy_s"] / wall_s) if wall_s else None,
            "outside_largest": 1 - largest_s / total, "largest_category": largest,
            "kernel_time_s": summary["kernel_time_s"], "launches": summary["launches"]}


def host_by_rank(facts: dict[str, Any]) -> list[dict[str, float]] | None:
    """Each rank's launching thread over the timed calls (the worker's claims, facts["claims"]["host"],
    one entry a checked call, the timed ones last): the median and the range of when its function
    returned and of its thread's CPU seconds by then. None where a timed call has no such claim."""
    host, runs = (facts.get("claims") or {}).get("host") or [], len(facts.get("times_s") or [])
    timed = host[-runs:] if runs else []
    if not timed or any(not isinstance(t, list) for t in timed):
        return None
    out = []
    for rank in range(len(timed[0])):
        returned, cpu = ([t[rank][k] for t in timed] for k in (0, 1))  # replies.host: one pair a rank
        out.append({"returned_s": statistics.median(returned), "returned_range_s": (min(returned), max(returned)),
                    "thread_cpu_s": statistics.median(cpu), "thread_cpu_range_s": (min(cpu), max(cpu))})
    return out


def report(summary: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """The worker's summary joined with what the harness measured itself (the call time)."""
    wall = facts.get("median_s") or 0.0
    return {**summary, "preset": facts["preset"], "gpu": facts["gpu"], "torch": facts["torch"],
            "cuda": facts.get("cuda"), "cudnn": facts.get("cudnn"), "candidate": facts["candidate"],
            "input": "throwaway inputs, in a fresh worker given nothing hidden (never used for timing or the gate)", "info": facts.get("info"), "wall_s": wall,
            "executed_flops": (facts.get("claims") or {}).get("executed_flops"),
            "host": host_by_rank(facts), "calls": len(facts.get("times_s") or []),
            **{k: facts.get(k) for k in ("flops", "floor_s", "floor_note", "x_floor")},
            **claimed(summary, wall)}


def to_markdown(r: dict[str, Any], title: str) -> str:
    """The report as markdown; the worker's words (info, kernel names) escaped, never raw."""

    u = r["unit"]
    lines = [
        f"# Profile: {title}", "",
        f"- candidate: {markdown(Path(r['candidate']).name)}, info: {markdown(r['info'])}",
        f"- preset {r['preset']} on {r['gpu']}; torch {r['torch']}, CUDA {r['cuda']}, cuDNN {r['cudnn']}",
        f"- input: {r['input']}",
        f"- wall time of one call (the harness's median, unprofiled): {r['wall_s']:.4f} s",
        f"- {u} time in {'kernels' if u == 'GPU' else 'aten ops'}: {r['kernel_time_s']:.4f} s; "
        f"{u} busy fraction (the worker's own figure: a claim): {r['busy_fraction']:.1%}",
        f"- share of {u} time outside the largest category ({r['largest_category']}): {r['outside_largest']:.1%}",
        f"- {'kernel launches' if u == 'GPU' else 'aten ops'} per forward: {r['launches']}",
    ]
    if r.get("executed_flops") and r.get("flops"):
        lines.append(f"- FLOPs: {r['executed_flops'] / 1e12:.6g} T executed (counted around one call in the worker: a claim), "
                     f"{r['flops'] / 1e12:.6g} T nominal (the model's own forward)")
    if r.get("floor_s"):
        lines.append(f"- floor {r['floor_s']:.4g} s ({r['floor_note']}); the call is {r['x_floor']:.2f}x the floor")
    c = r["compile"]
    lines.append("- torch.compile: not used" if c is None else
                 f"- torch.compile: {c['graph_breaks']} graph breaks, {c['unique_graphs']} unique graphs")
    if r.get("host"):
        lines += ["", f"## The launching thread of each rank, over the {r['calls']} timed calls (the worker's claims)", "",
                  "When the candidate's function returned and the CPU seconds its thread had spent by then, median "
                  f"(range), from the worker's start of the call; the call: {r['wall_s']:.4f} s on the harness's clock, "
                  "the hand-over of its input and output included. "
                  + ("On a GPU the function returns once its work is queued: one that returns only near the call's "
                     "end, its thread busy throughout, is bound by its launches, not by the GPU." if u == "GPU" else
                     "On a CPU the function returns when its work is done, so these say little about launches."), "",
                  "| rank | returned after (s) | thread CPU (s) |", "|---:|---:|---:|"]
        for rank, h in enumerate(r["host"]):
            lines.append(f"| {rank} | {h['returned_s']:.4f} ({h['returned_range_s'][0]:.4f}-{h['returned_range_s'][1]:.4f}) "
                         f"| {h['thread_cpu_s']:.4f} ({h['thread_cpu_range_s'][0]:.4f}-{h['thread_cpu_range_s'][1]:.4f}) |")
    lines += ["", f"## {u} time by category", "", "| category | time (s) | share |", "|---|---:|---:|"]
    total = sum(r["by_category_s"].values()) or 1.0
    for cat, t in sorted(r["by_category_s"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {cat} | {t:.4f} | {100 * t / total:.1f}% |")
    lines += ["", f"## Top {'kernels' if u == 'GPU' else 'ops'} by {u} time (the worker's claims: names, counts and "
              "times as it reported them)", "",
              "| # | name | category | calls | time (s) | share |", "|---:|---|---|---:|---:|---:|"]
    for i, k in enumerate(r["top"], 1):
        lines.append(f"| {i} | {markdown(k['name'], 90)} | {k['category']} | {k['calls']} | {k['time_s']:.4f} | {k['pct']:.1f}% |")
    return "\n".join(lines) + "\n"
