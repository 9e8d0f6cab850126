"""Time the candidate: warm-up apart, N timed calls, median and spread; every call checked.

Usage:
    auto-optim bench [--preset P] [--candidate FILE] [--device cpu|cuda] [--runs N]
                            [--baseline] [--unsandboxed]

The calls run in a sandboxed worker exactly as verify's do (harness/measure/session.py); the clock is
read by this process, from handing an input over to holding the complete output, and every
output is checked, so a timed call cannot be told from a checked one. One more call (a fresh
input, checked) counts the FLOPs the candidate executes, for the floor (harness/decide/floor.py).

--baseline first measures the frozen model's eager forward in fp32 (PyTorch defaults) and in bf16
(harness/baselines/), each in its own worker the same way, in this same run before the candidate,
and reports the speedups as ratios of medians measured side by side.

Output: human lines, `key: value` lines, one final JSON line (see console.emit).
Exit: 0 measured, 1 the candidate crashed or failed the gate, 2 broken setup.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness import console, machine, paths, _common
from harness.decide import floor
from harness.measure.session import Session
from harness.errors import Refused

BASELINES = Path(__file__).resolve().parents[1] / "baselines"


def time_baselines(preset: str | None, device: str | None, runs: int | None, unsandboxed: bool) -> dict[str, float]:
    """fp32 and bf16 eager medians, each measured and checked like any candidate."""
    out: dict[str, float] = {}
    for name in ("fp32_eager", "bf16_eager"):
        with Session(BASELINES / f"{name}.py", preset, device, unsandboxed=unsandboxed, runs=runs) as s:
            f = s.measure()
        if not f["passed"]:
            raise Refused(f"the {name} baseline failed: {f['reason']}")
        out[f"{name}_s"] = f["median_s"]
    return out


def measure(candidate: Path | None = None, preset: str | None = None, device: str | None = None,
            runs: int | None = None, baseline: bool = False, unsandboxed: bool = False) -> dict[str, Any]:
    """Benchmark one candidate (and the baselines first, when asked)."""
    base = time_baselines(preset, device, runs, unsandboxed) if baseline else None
    with Session(candidate, preset, device, unsandboxed=unsandboxed, runs=runs) as s:
        facts = s.measure()
        if facts["passed"]:
            s.count_flops(facts)
        floor.annotate(facts, s.goals, s.adapter, list(s.bench_x.shape), floor.load_peak(facts["gpu"]))
    if base and facts["passed"]:
        facts["baseline"] = {**base, "speedup_vs_fp32": base["fp32_eager_s"] / facts["median_s"],
                             "speedup_vs_bf16": base["bf16_eager_s"] / facts["median_s"]}
    return facts


def human(f: dict[str, Any]) -> list[str]:
    lines = [
        f"bench {Path(f['candidate']).name} [{f['preset']}] on {f['gpu']} "
        f"(torch {f['torch']}, CUDA {f['cuda']}, cuDNN {f['cudnn']}); input: {f['input']} and fresh pool inputs; "
        f"sandbox: {f['sandbox']}",
        f"  warm-up {f['warmup_s']:.3f} s (build {f['build_s']:.3f} s + first calls {f['first_calls_s']:.3f} s), not timed",
        f"  {f['runs']} runs: median {f['median_s']:.4f} s  min {f['min_s']:.4f}  max {f['max_s']:.4f}  MAD {f['mad_s']:.4f}",
        f"  boundary (handing an input over and the output back, timed before any candidate code ran): "
        f"{f['boundary_s'] * 1e3:.2f} ms = {f['boundary_pct']:.3f}% of the median",
        "  peak memory: " + ("not measured" if f.get("peak_mem_gb") is None else f"{f['peak_mem_gb']:.2f} GB (worker's own report)"),
    ]
    if f.get("flops"):
        count = (f.get("claims") or {}).get("executed_flops")  # the worker's count: a claim
        executed = f"executed {count / 1e12:.4g} TFLOP (the worker's count), " if count else ""
        lines.append(f"  {executed}nominal {f['flops'] / 1e12:.4g} TFLOP (the model's own forward) -> "
                     f"{f['tflops']:.4g} TFLOP/s at the nominal count")
    if f.get("floor_s"):
        lines.append(f"  floor {f['floor_s']:.4g} s: {f['floor_note']}; the median is {f['x_floor']:.2f}x the floor")
    elif not machine.on_cpu(f["gpu"]):  # on a CPU a floor means nothing: no line
        lines.append(f"  {f.get('floor_note', 'no floor')}")
    if "baseline" in f:
        b = f["baseline"]
        lines.append(f"  baselines (same run): fp32 eager {b['fp32_eager_s']:.4f} s "
                     f"(x{b['speedup_vs_fp32']:.2f}), bf16 eager {b['bf16_eager_s']:.4f} s (x{b['speedup_vs_bf16']:.2f})")
    return lines


def parser() -> argparse.ArgumentParser:
    """The options (harness/cli/person.py reads the person's powers from what this parser makes)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("--preset")
    p.add_argument("--candidate", type=Path)
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--runs", type=int, help=f"timed runs (at least {_common.MIN_RUNS}; default: the preset's)")
    p.add_argument("--baseline", action="store_true", help="also time fp32 and bf16 eager in this run")
    p.add_argument("--unsandboxed", action="store_true", help="run the candidate without a sandbox")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.runs is not None and a.runs < _common.MIN_RUNS:
        print(f"bench: --runs must be at least {_common.MIN_RUNS}", file=sys.stderr)
        return 2
    try:
        facts = measure(a.candidate, a.preset, a.device, a.runs, a.baseline, a.unsandboxed)
    except Refused as e:
        print(f"bench: broken setup: {e}", file=sys.stderr)
        console.emit([f"FAILED (setup): {e}"], {"ok": False, "reason": f"setup: {e}", "median_s": None})
        return 2
    facts["ok"] = facts["passed"]
    if not facts["passed"]:
        console.emit([f"FAILED ({facts['status']}): {facts['reason']}"], facts)
        return 1
    console.emit(human(facts), facts)
    return 0


if __name__ == "__main__":
    from harness.cli import person

    person.refuse_agent(parser(), sys.argv[1:], "harness/cli/bench.py")
    sys.exit(main())

# rewritten by a candidate

# rewritten by a candidate
