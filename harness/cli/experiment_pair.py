"""An experiment's measuring half: the baseline and the candidate, timed beside its keeper (harness/measure/alternate.py), a record each.

Besides its figures a keeper's record carries its profile (markdown, and the figures the stop rule
reads) and a quality strip of its worst frame; a candidate that does not compile is recorded as a
crash without a worker of its own, and the preset's memory clause is checked first.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from pathlib import Path
from typing import Any

from harness import hashing, machine, _common
from harness.decide import keep_rule
from harness.cli.keepers import BASELINE
from harness.cli.phases import phase
from harness.measure.locks import device_slot
from harness.errors import Refused
from harness.ledger.store import utc_now

BASELINE_DESC = "baseline: the frozen model, fp32 eager (PyTorch defaults), on this machine"
BASELINE_ON_ONE = " (a preset of {ranks} ranks: the whole decode on one, the others idle)"


def metric_of(facts: dict[str, Any], goals: dict[str, Any], preset: str) -> tuple[float, float]:
    """(metric, its spread) from a session's timings: seconds, or work per second."""
    if goals.better == "lower":
        return facts["median_s"], facts["spread_s"]
    work = float(goals["presets"][preset].get("work_per_call", 1))
    return work / facts["median_s"], work / facts["min_s"] - work / facts["max_s"]


def measure_files(a: argparse.Namespace, goals: dict[str, Any], preset: str, device: str, fh: str,
                   keeper: Path | None, cand: Path, first: bool,
                   keepers: tuple[Any, Any]) -> list[dict[str, Any]]:
    """One record per measured file: [baseline, candidate] on a first run, else [candidate]."""
    from harness.decide import floor  # lazy, as these: --apply, --help and a refusal need no torch (floor imports it)
    from harness.measure.alternate import CandidateDidNotStart, measure_pair, started  # lazy: --apply and --help need no torch
    from harness.measure.session import Session

    options = {"unsandboxed": a.unsandboxed, "timeout": a.timeout}
    broken = compile_error(cand)  # before any worker starts: compiling runs none of its code
    if broken:
        print(f"run_experiment: {broken}; recorded as a crash, no worker of its own started"
              + ("; first the baseline this machine needs" if first else ""), file=sys.stderr, flush=True)
    # first, while no other worker is alive (harness/measure/memory_limit.py)
    fits = None if broken else memory_check(goals, preset, device, cand, options)

    def new_rec(path: Path, desc: str, is_baseline: bool) -> dict[str, Any]:
        return {"desc": desc, "preset": preset, "device": device, "frozen_hash": fh, "timestamp": utc_now(),
                "rebaseline": is_baseline, "candidate_file": str(path), "profile_md": None, "profile": None,
                "strip_png": None, "gpu_index": device_slot()}

    def fill(rec: dict[str, Any], s: Any, facts: dict[str, Any]) -> None:
        out = facts.pop("_bench_out", None)
        if fits is not None and not rec["rebaseline"]:
            facts["memory_check"] = fits.as_fact()
        rec["source"] = s.source.decode()
        rec["candidate_sha"] = hashing.sha256_bytes(s.source)[:16]
        rec["facts"] = facts
        rec["outcome"] = "measured" if facts["passed"] else facts["status"]
        rec["reason"] = facts["reason"]
        if facts["passed"]:
            rec["metric"], rec["metric_spread"] = metric_of(facts, goals, preset)
            rec["would_be"] = "baseline" if rec["rebaseline"] else keep_rule.judge_record(
                rec, goals, *keepers, _common.root() / "records").status
            if rec["would_be"] == "keep" and not a.no_profile:  # the baseline is the frozen model
                phase("profiling the keeper-to-be")
                rec["profile_md"], rec["profile"] = profile_md(s, facts, goals)
                if not facts["passed"]:  # a profiled call is checked like the others
                    rec.update(outcome=facts["status"], reason=facts["reason"])
            if not rec["rebaseline"]:  # after the profile's calls: its title quotes the row's final quality
                rec["strip_png"] = quality_strip_b64(s, out, rec["desc"], facts)
        floor.annotate(facts, goals, s.adapter, list(s.bench_x.shape), floor.load_peak(facts["gpu"]))

    def crashed(rec: dict[str, Any], reason: str) -> list[dict[str, Any]]:
        """The candidate's record where it never ran a call: a crash, with why."""
        source = cand.read_bytes()
        rec.update(source=source.decode(errors="replace"), candidate_sha=hashing.sha256_bytes(source)[:16],
                   facts={"gpu": machine.env_info(device, ranks)["gpu"], "passed": False, "status": "crash",
                          "reason": reason}, outcome="crash", reason=reason)
        if first:  # the baseline alone: a first run records it whatever the candidate did
            with Session(BASELINE, preset, device, **options) as k:
                fill(recs[0], k, k.measure())
            if recs[0]["outcome"] != "measured":
                return recs[:1]
        return recs

    ranks = goals.presets[preset].ranks
    base_desc = BASELINE_DESC + (BASELINE_ON_ONE.format(ranks=ranks) if ranks > 1 else "")
    recs = ([new_rec(BASELINE, base_desc, True)] if first else []) + [new_rec(cand, a.desc, False)]
    try:
        if broken:
            return crashed(recs[-1], broken)
        if keeper is None:
            phase("starting the worker, building, warming up and measuring the candidate")
            with Session(cand, preset, device, **options) as s:
                fill(recs[-1], s, s.measure(want_frame=True))
            return recs
        with started(keeper, cand, preset, device, **options) as (k, s):
            kf, cf = measure_pair(k, s, pairs(goals, preset, s), want_frame=True, keeper_in_full=first)
            k.stop_worker()  # timed: nothing of the keeper's runs beside the candidate's profile worker
            if first:
                fill(recs[0], k, kf)
                if not kf["passed"]:
                    return recs[:1]  # without a baseline there is nothing to judge the candidate against
                b = recs[0]  # what the candidate is judged against: this baseline, not yet a row
                keepers = ({"status": "baseline", "exp": "the baseline", "metric": b["metric"],
                            "median_s": kf["median_s"], "candidate_sha": b["candidate_sha"],
                            "warmup_s": kf.get("warmup_s")},) * 2
            fill(recs[-1], s, cf)
    except CandidateDidNotStart as e:  # its module is imported as its worker starts (harness/worker/main.py)
        return crashed(recs[-1], f"the candidate's worker did not start (its module is imported then): {e}")
    return recs


def compile_error(path: Path) -> str | None:
    """Why the candidate file does not compile, with its line, or None: compile() runs none of its
    code, so a syntax error is answered in a second, before any worker starts."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"candidate does not compile: {type(e).__name__}: {e.msg} ({path.name} line {e.lineno})"
    except ValueError as e:  # a null byte
        return f"candidate does not compile: {e}"
    return None


def memory_check(goals: dict[str, Any], preset: str, device: str, cand: Path,
                 options: dict[str, Any]) -> "memory_limit.MemoryCheck | None":
    """The preset's memory clause (harness/measure/memory_limit.py), checked before the timed pair while
    no other worker is alive; None where the preset has none or there is no GPU to hold it on."""
    gb = goals.presets[preset].memory_gb
    if gb is None or device != "cuda":
        return None
    from harness.measure import memory_limit

    return memory_limit.check(cand, preset, gb, **options)


def pairs(goals: dict[str, Any], preset: str, s: Any) -> int:
    """Timed pairs: the preset's timed_runs as written (goals.json: at least keep_rule.MIN_PAIRS),
    refused where the pool cannot give every call a fresh input (the benchmark input, then a pool
    input a call; a keeper's profile takes two more)."""
    want = goals.presets[preset].timed_runs
    need = s.warmup + want - 1 + 2
    if len(s.pool) < need:
        raise Refused(f"preset {preset} asks for {want} timed pairs after {s.warmup} warm-up call(s): its pool holds "
                      f"{len(s.pool)} inputs, they need {need}; remake it (python -P -m harness.target.make_reference --only pool "
                      f"--force) with goals.json pool.size >= {need}")
    return want
def profile_md(s: Any, facts: dict[str, Any], goals: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The keeper's profile as markdown, and the figures the stop rule reads (harness/decide/floor.py)."""
    from harness.decide import floor
    from harness.measure import profile

    summary = s.profile(facts)
    if summary is None:
        return f"profile failed: {facts.get('reason')}\n", None
    floor.annotate(facts, goals, s.adapter, list(s.bench_x.shape), floor.load_peak(facts["gpu"]))
    r = profile.report(summary, facts)
    return profile.to_markdown(r, "pending"), {k: r[k] for k in ("busy_fraction", "outside_largest", "largest_category", "kernel_time_s", "launches")}


def quality_strip_b64(s: Any, out: Any, desc: str, facts: dict[str, Any]) -> str | None:
    """The strip PNG (base64, so it travels in a JSON record) from the benchmark output's worst frame."""
    if out is None or not hasattr(s.adapter, "frames"):
        return None
    try:
        from harness.ledger import plots  # lazy: matplotlib inside
        from harness.cli.verify import worst_frame

        f = worst_frame(s.adapter, out, s.bench_ref.cpu(), s.goals["gate"])
        png = _common.root() / "runs" / f"strip_{os.getpid()}.png"
        png.parent.mkdir(parents=True, exist_ok=True)
        plots.quality_strip(f["reference"], f["candidate"], png, title=strip_title(desc, f, facts, s.goals.quality_name))
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        png.unlink()
        return data
    except ImportError as e:
        print(f"run_experiment: quality strip skipped ({e})", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a picture must never lose a record
        print(f"run_experiment: quality strip failed: {type(e).__name__}: {e}", file=sys.stderr)
    return None


def strip_title(desc: str, frame: dict[str, Any], facts: dict[str, Any], name: str) -> str:
    """The strip's title: its frame's quality, and the row's figure beside it with why they differ
    (the row's is the worst over every checked output, each whole; the strip shows one frame of
    the benchmark input's output), so the two never read as one figure that disagrees."""
    checked = len(facts.get("checked") or [])
    whole = facts.get("benchmark_quality")
    return (f"{desc}\nframe {frame['index']} of {frame['count']} of the benchmark input's output, the one furthest "
            f"from its reference: {name} {frame['quality']:.4g} on this frame"
            + (f" ({whole:.4g} over the whole output)" if isinstance(whole, (int, float)) else "")
            + (f"\nthe row's {name} {facts['quality']:.4g} is the worst over all {checked} checked outputs (fresh "
               f"inputs too, each output whole), not this frame's" if isinstance(facts.get("quality"), (int, float)) else ""))
