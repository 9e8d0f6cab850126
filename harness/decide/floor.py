"""The floor and the stop rule: how far a candidate is from what its own work needs.

Usage:
    auto-optim floor [--device cpu|cuda] [--force]    # probe this machine's peak rates
    auto-optim floor --verdict [--preset P]           # the stop rule on this machine's rows

The floor of one call is the work the candidate executes there at the best rate this machine
reaches on that kind of work (goals.json "floor": {"work": "flops" | "bytes"}):
- "flops" (the default): FLOPs counted around one call of the candidate in the worker (torch's
  FlopCounterMode; a sub-pixel rewrite that computes less lowers its own floor; the worker's count
  is the candidate's claim, facts["claims"], never taken above the nominal count), else the model's
  nominal FLOPs (adapter.flops) and the report says so; over the best FLOP rate of the probes.
  The counter sees torch ops only: a count under half the nominal FLOPs means the work runs in
  kernels it cannot see (a cuDNN graph, a custom kernel), so the floor takes the nominal count.
- "bytes": the bytes a call cannot avoid moving (adapter.min_bytes, e.g. an LLM's weights once
  a token) over the device's measured copy bandwidth.
The peak rates come from a probe run once per machine (prepare.py runs it): a large matmul, a
large copy, and the adapter's own probes (adapter.peak_probes: its dominant op at the shapes the
model runs), stored in assets/peak-<machine>.json. No constant in goals.json.

The stop rule (goals.json "stop_rule"; program.md section 7), judged on the best row of this
machine: stop only when all of these hold, else "not yet" with every reason.
  - plateau: `plateau_attempts` rows since the best one, none of them better;
  - the device busy at least `gpu_busy_min` of the timed calls, as the harness sampled it (NVML;
    the candidate's own profile is a claim and cannot stand in for it), and its profile with at
    most `max_outside` of kernel time outside the largest kernel class (on the VAE: time not in
    convolutions);
  - its median within `within_floor` of the floor (median <= (1 + within_floor) x floor).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from harness import console, machine, paths, _common
from harness.target import assets
from harness.goals import as_goals
from harness.measure.locks import device_lock
from harness.errors import Refused

UNITS = {"flops": "TFLOP/s", "bytes": "TB/s"}  # the probes' rates, printed in these (x 1e12)
SEEN = 0.5  # an executed count under half the nominal FLOPs missed kernels torch cannot see
TRIALS = 5
TRIAL_S = 0.05  # repeat a probe until one trial takes at least this long


# --------------------------------------------------------------------------- the probe
def peak_path(machine: str) -> Path:
    """Where the probe of a machine (machine.env_info's "gpu": the GPU's name, or the CPU's) is kept."""
    return assets.assets_dir() / f"peak-{console.slug(machine)}.json"


def _rate(fn: Callable[[], Any], work: float, device: str) -> tuple[float, float]:
    """(work per second, seconds a run): the median of TRIALS trials of back-to-back runs."""
    for _ in range(2):  # warm-up: allocation, autotuning, lazy init
        fn()
    machine.sync(device)
    t0 = time.perf_counter()
    fn()
    machine.sync(device)
    reps = max(1, math.ceil(TRIAL_S / max(time.perf_counter() - t0, 1e-6)))
    trials = []
    for _ in range(TRIALS):
        machine.sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        machine.sync(device)
        trials.append((time.perf_counter() - t0) / reps)
    s = statistics.median(trials)
    return work / s, s


def _generic_probes(device: str) -> list[dict[str, Any]]:
    """A square matmul in the device's fast dtype and a large copy: what any target can use."""
    n, dtype = (8192, torch.bfloat16) if device == "cuda" else (1024, torch.float32)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    src = torch.empty(1 << (29 if device == "cuda" else 26), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return [
        {"name": f"matmul {n}x{n}x{n} {str(dtype).replace('torch.', '')}", "kind": "flops",
         "work": 2.0 * n ** 3, "fn": lambda: torch.mm(a, b)},
        {"name": f"copy {src.numel() >> 20} MiB", "kind": "bytes", "work": 2.0 * src.numel(),
         "fn": lambda: dst.copy_(src)},
    ]


def probe(device: str, adapter: Any) -> dict[str, Any]:
    """Time the probes on this machine; JSON-safe, with the machine and versions."""
    if device == "cuda":
        torch.backends.cudnn.benchmark = True  # as the candidates may
    probes = _generic_probes(device)
    if hasattr(adapter, "peak_probes"):
        probes += [{**p, "kind": "flops"} for p in adapter.peak_probes(device)]
    rows = []
    for p in probes:
        rate, s = _rate(p["fn"], p["work"], device)
        rows.append({"name": p["name"], "kind": p["kind"], "work": p["work"], "seconds": s, "rate": rate})
        del p["fn"]
    if device == "cuda":
        torch.cuda.empty_cache()
    best = {k: max((r for r in rows if r["kind"] == k), key=lambda r: r["rate"]) for k in ("flops", "bytes")}
    return {**machine.env_info(device), "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "probes": rows,
            "peak": {k: {"rate": r["rate"], "op": r["name"]} for k, r in best.items()}}


def load_peak(machine: str) -> dict[str, Any] | None:
    """A machine's probe, or None when it was never run there (prepare.py runs it)."""
    try:
        return json.loads(peak_path(machine).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def ensure_peak(device: str, adapter: Any, force: bool = False) -> tuple[dict[str, Any], bool]:
    """(the probe, whether it was made now)."""
    gpu = machine.env_info(device)["gpu"]
    have = None if force else load_peak(gpu)
    if have is not None:
        return have, False
    made = probe(device, adapter)
    _common.atomic_write(peak_path(gpu), json.dumps(made, indent=1) + "\n")
    return made, True


# --------------------------------------------------------------------------- the floor
def annotate(facts: dict[str, Any], goals: dict[str, Any], adapter: Any, shape: list[int],
             peak: dict[str, Any] | None) -> None:
    """Add the nominal FLOPs, the floor and where the median stands against it to `facts`."""
    nominal = float(adapter.flops(shape)) if hasattr(adapter, "flops") else None
    med = facts.get("median_s")
    facts["flops"] = nominal
    facts["tflops"] = nominal / med / 1e12 if nominal and med else None
    kind = goals.get("floor", {}).get("work", "flops")
    executed = (facts.get("claims") or {}).get("executed_flops")  # counted in the worker: the candidate's claim
    if kind == "bytes":
        work = float(adapter.min_bytes(shape)) if hasattr(adapter, "min_bytes") else None
        source = "the adapter's minimum bytes"
    elif executed and nominal and executed > nominal:
        # More work than the model's own forward would raise its floor toward its median (an
        # easier stop). Never taken above nominal.
        work = nominal
        source = (f"nominal FLOPs (the worker claimed {executed / nominal:.3g}x them: its "
                  "count is the candidate's claim, never taken above the model's own)")
    elif executed and (not nominal or executed >= SEEN * nominal):
        work, source = float(executed), "executed FLOPs (counted in the worker: the candidate's claim)"
    elif executed:
        work = nominal
        source = (f"nominal FLOPs (the counter saw {executed / nominal:.1%} of them: the candidate "
                  "runs most of its work in kernels torch's counter cannot see)")
    else:
        work, source = nominal, "nominal FLOPs (no count of the executed ones)"
    rate = (peak or {}).get("peak", {}).get(kind, {})
    if facts.get("ranks", 1) > 1:  # the probe is of one device; a group's floor is not simply N of them
        facts.update(floor_s=None, floor_note=f"no floor for a group of {facts['ranks']} ranks: the probe is of one device")
        return
    if (peak or {}).get("device") == "cpu":  # a floor means nothing where the candidate is not written to run
        facts.update(floor_s=None, floor_note="no floor on a CPU: its probed rates are no peak a GPU candidate is held to")
        return
    if not work or not rate:
        facts.update(floor_s=None, floor_note="no floor: " + ("this machine's peak was never probed "
                     "(auto-optim floor)" if not rate else f"the target gives no {kind} count"))
        return
    floor_s = work / rate["rate"]
    if med and med < floor_s:  # faster than the probe's best rate allows: the probe missed the peak
        facts.update(floor_s=None, floor_note=f"no floor: the median is below the {floor_s:.4g} s that {source} at the "
                     f"probed rate would take, so the probe did not find this machine's peak (auto-optim floor --force)")
        return
    facts["floor_s"] = floor_s
    facts["floor_note"] = (f"{source} {work:.4g} at this machine's best measured rate "
                           f"{rate['rate'] / 1e12:.4g} {UNITS[kind]} ({rate['op']})")
    facts["x_floor"] = med / floor_s if med else None


# --------------------------------------------------------------------------- the stop rule
def verdict(rule: dict[str, Any], median_s: float | None, floor_s: float | None, busy: float | None,
            outside: float | None, attempts: int, largest: str = "the largest class",
            claimed_busy: float | None = None) -> tuple[bool, list[str]]:
    """(stop?, the reasons it may not stop yet); every unmet or unknown condition is a reason.

    What it rests on. The harness's own figures: `busy` (NVML sampled during the timed calls,
    harness/measure/busy.py: no process can write it, though any can keep the device busy), the plateau
    (`attempts`, from the rows) and the median. The candidate's claims (its worker measured them
    and could forge them, facts["claims"]): `outside` and the FLOP count under the floor (never
    taken above the model's nominal count, annotate). No STOP without the harness's busy figure
    and the plateau, so claims alone can never end the loop (`claimed_busy`, the profile's own
    busy fraction, only informs the reason); and a STOP is printed as resting on those claims, for
    a person to confirm (harness/decide/floor.py main)."""
    why = []
    if attempts < rule["plateau_attempts"]:
        why.append(f"{console.plural(attempts, 'attempt')} since the best row; the plateau needs {rule['plateau_attempts']}")
    if busy is None:
        claim = f" (the candidate's own profile claims {claimed_busy:.1%}: a claim, not a measure)" \
            if claimed_busy is not None else ""
        why.append(f"the harness did not measure how busy the device is (NVML, on a GPU){claim}")
    elif busy < rule["gpu_busy_min"]:
        why.append(f"the device is busy {busy:.1%} of the timed calls (sampled by the harness); "
                   f"the rule wants {rule['gpu_busy_min']:.0%}")
    if outside is None:
        why.append("the best row has no recorded profile (auto-optim profile)")
    elif outside > rule["max_outside"]:
        why.append(f"{outside:.1%} of kernel time is outside {largest} (the candidate's profile claims it); "
                   f"the rule allows {rule['max_outside']:.0%}")
    if floor_s is None or not median_s:
        why.append("no floor on this machine (auto-optim floor probes it)")
    elif median_s > (1 + rule["within_floor"]) * floor_s:
        why.append(f"the median {median_s:.4g} s is {median_s / floor_s:.2f}x the floor {floor_s:.4g} s; "
                   f"the rule wants at most {1 + rule['within_floor']:.2f}x")
    return not why, why


def verdict_for_rows(rows: list[dict[str, str]], goals: dict[str, Any], preset: str, gpu: str,
                     peak: dict[str, Any] | None, adapter: Any, records_dir: Path) -> tuple[bool, list[str], str | None]:
    """The stop rule for the best row of (preset, gpu), from results.tsv rows and its record."""
    from harness.ledger import rows as R
    from harness.ledger.store import Store

    better = as_goals(goals).better
    best = R.best_row(rows, preset, gpu, better)
    if best is None:
        return False, ["no measured row on this machine yet"], None
    mine = [r for r in rows if r.get("preset") == preset and r.get("gpu") == gpu]
    after = mine[mine.index(best) + 1:]
    attempts = sum(1 for r in after if r["status"] not in ("baseline", "rerun"))
    try:
        rec = Store(records_dir).read(best["exp"]).to_json()
    except Refused:  # no record, or one that cannot be read: the row's figures
        rec = {}
    facts = dict(rec.get("facts") or {"median_s": R.Row.of(best).median_s})
    if facts.get("executed_flops") is not None and "claims" not in facts:  # an older record: its count is a claim too
        facts["claims"] = {"executed_flops": facts.pop("executed_flops")}
    if facts.get("floor_s") is None:  # recorded before the machine was probed, or before floors
        annotate(facts, goals, adapter, goals["presets"][preset]["input_shape"], peak)
    # The profile's figures: the candidate's claims, labelled so (facts["claims"]); an older record
    # keeps them in its "profile" only.
    prof = (facts.get("claims") or {}).get("profile") or rec.get("profile") or {}
    stop, why = verdict(goals["stop_rule"], facts.get("median_s"), facts.get("floor_s"), facts.get("device_busy"),
                        prof.get("outside_largest"), attempts, prof.get("largest_category", "the largest class"),
                        claimed_busy=prof.get("busy_fraction"))
    return stop, why, best["exp"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--preset")
    p.add_argument("--force", action="store_true", help="probe again even if this machine has a probe")
    p.add_argument("--verdict", action="store_true", help="print the stop rule's verdict for this machine")
    a = p.parse_args(argv)
    try:
        goals = _common.load_goals()
        adapter = _common.load_adapter(goals)
        device = a.device or machine.default_device()
        if a.verdict:
            from harness.ledger import results

            preset = _common.pick_preset(goals, a.preset, device)
            gpu = machine.env_info(device)["gpu"]
            if machine.on_cpu(gpu):  # no probe, profile or busy figure here can change that
                console.emit([f"stop rule on {gpu} [{preset}]: not judged on a CPU. A CPU has no floor (its probed "
                              "rates are no peak a GPU candidate is held to) and no GPU busy figure, so no run here can "
                              "meet the stop rule, and a floor probe here changes nothing; ask for the verdict on the GPU "
                              'machine (`auto-optim floor --verdict`; the agent: request.json {"run": "floor"})'],
                             {"stop": False, "best": None, "reasons": ["a CPU has no floor"]})
                return 0
            stop, why, exp = verdict_for_rows(results.rows(), goals, preset, gpu, load_peak(gpu), adapter,
                                              _common.root() / "records")
            verdict_text = ("STOP (on the candidate's own FLOP count and profile, with the harness's busy sample: "
                            "a person confirms before the loop ends)" if stop else "not yet")
            console.emit([f"stop rule on {gpu} [{preset}], best row {exp}: {verdict_text}"]
                   + [f"  - {w}" for w in why], {"stop": stop, "best": exp, "reasons": why})
            return 0
        # A probe beside a measurement on the same GPU would store low rates for good (a floor
        # too high, a stop too easy): it waits for the device as a measurement does.
        with device_lock():
            peak, made = ensure_peak(device, adapter, a.force)
    except Refused as e:
        print(f"floor: {e}", file=sys.stderr)
        return 2
    lines = [f"peak rates of {peak['gpu']} ({'measured now' if made else 'probed before'}, {peak['measured']}):"]
    lines += [f"  {r['name']}: {r['rate'] / 1e12:.4g} {UNITS[r['kind']]} ({r['seconds'] * 1e3:.3f} ms a run)"
              for r in peak["probes"]]
    console.emit(lines, {"path": str(peak_path(peak["gpu"])), "peak_flops": peak["peak"]["flops"]["rate"],
                   "peak_bytes": peak["peak"]["bytes"]["rate"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
