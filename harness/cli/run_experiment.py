"""Run one experiment: measure (the candidate beside its keeper) -> decide -> record (-> commit + profile).

Usage:
    python harness/cli/run_experiment.py --desc "bf16 weights" [--preset P] [--candidate FILE]
                                     [--device cpu|cuda] [--timeout S] [--no-profile] [--unsandboxed]
    python harness/cli/run_experiment.py --desc "..." --measure-only --record-out rec.json
    python harness/cli/run_experiment.py --apply rec.json
    add --rebaseline (a person, on purpose) to start a new comparison: a new baseline row first

The baseline. The first run on a machine (no baseline row yet for this preset and GPU model), or
a run with --rebaseline, first measures the frozen model's own fp32 eager forward
(harness/baselines/fp32_eager.py) and records it as the `baseline` row; then the candidate is
measured against it. So the first thing a user sees is a true ratio over fp32 eager.

The keep rule (harness/keep_rule.py, the one place it is decided). The candidate is timed in
alternation with the code it would replace, the current keeper (the latest keep since the
baseline, whose source optimize.py holds; on a first run the baseline), each in a worker of its
own (harness/measure/alternate.py), and judged only against it: keep, revert, inconclusive or rerun, by
the rule harness/keep_rule.py's docstring states (its one statement). A keeper's source becomes
optimize.py (goals.json "candidate") and is committed, then profiled in the same worker. Anything
else leaves optimize.py at the current keeper: after a revert, an inconclusive run or a failure of
an edited optimize.py it is put back, the candidate's source kept in its record (python
harness/records.py source EXP prints it); a --candidate file is never modified. The best or the
current keeper's own source measured again (on a fresh machine, say) is a `rerun`, with its
distance from that keeper.

Every attempt appends exactly one row to results.tsv (baseline, keep, revert, inconclusive, rerun,
gate_fail, crash, timeout, tampered) with the experiment's wall time and the sandbox it ran in, writes its
record to records/<exp>.json (the source, every figure, the profile and quality strip of a
keeper), regenerates leaderboard.md and this machine's progress/<preset>-<machine>.png and adds a
line to PROGRESS.md.

Tamper check: the frozen files (harness/, model/, goals.json) are hashed before and after; a
change during the run voids it (status `tampered`, nothing kept or committed). A run refuses to
start when the frozen files differ from the baseline's.

Locks (runs/; harness/measure/locks.py): one experiment or wave per checkout, one measurement per GPU;
records.lock: held by apply from reading results.tsv to the last write, so writers that finish
together stay whole.

Record-file mode, for a GPU machine without .git: --measure-only measures (and profiles a
would-be keeper, judged against the keeper timed beside it) and writes a JSON record,
signed with the person's key (harness/signing.py; give that machine a copy of the key folder
through AUTO_OPTIM_KEY_DIR); --apply does the bookkeeping half in the git checkout, for a record
that key signed only, and checks every field of it (read_record_file, validate_record).
--apply, --record-out, --measure-only, --unsandboxed and --rebaseline are the person's (harness/cli/person.py,
`auto-optim`): the agent runs experiments only through its door (harness/cli/door.py, request.json), and
Claude Code's hook lets nothing else out of its sandbox (agent/hooks/guard_frozen.py).
The candidate is read without following a link (harness/sandbox/snapshot.py), and the worker imports the
bytes the harness read.
Exit: 0 measured and recorded (baseline, keep, revert, inconclusive, rerun: the candidate passed every check,
whatever the decision), 1 recorded but the candidate failed (gate_fail, crash, timeout, tampered),
2 refused (nothing recorded), 130 interrupted (Ctrl-C; nothing recorded for the run in progress).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import paths, _common  # noqa: E402
from harness.cli.phases import phase  # noqa: E402
from harness import floor  # noqa: E402
from harness import keep_rule  # noqa: E402
from harness import records  # noqa: E402
from harness.sandbox import snapshot  # noqa: E402
from harness import git_plumbing  # noqa: E402
from harness.measure.locks import acquire_lock, device_lock, device_slot  # noqa: E402
from harness.ledger import apply, check_committed, check_frozen, git_repo, summary  # noqa: E402
from harness.cli.prepare import DISK_ERRORS, disk_error  # noqa: E402
from harness.record_file import check_record_out, read_record_file, write_record_file  # noqa: E402
from harness.records import Refused  # noqa: E402

HARNESS = Path(__file__).resolve().parents[1]
BASELINE = HARNESS / "baselines" / "fp32_eager.py"
BASELINE_DESC = "baseline: the frozen model, fp32 eager (PyTorch defaults), on this machine"
BASELINE_ON_ONE = " (a preset of {ranks} ranks: the whole decode on one, the others idle)"


def metric_of(facts: dict[str, Any], goals: dict[str, Any], preset: str) -> tuple[float, float]:
    """(metric, its spread) from a session's timings: seconds, or work per second."""
    if goals.better == "lower":
        return facts["median_s"], facts["spread_s"]
    work = float(goals["presets"][preset].get("work_per_call", 1))
    return work / facts["median_s"], work / facts["min_s"] - work / facts["max_s"]


rerun_of = keep_rule.rerun_of


# --- the measuring half ------------------------------------------------------------------------

def measure(a: argparse.Namespace, goals: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU half: a baseline record first when this machine has none, then the candidate's.
    The candidate is timed in alternation with the code it would replace (harness/measure/alternate.py):
    the current keeper, or on a first run the baseline itself; alone when it re-runs a keeper
    (harness/keep_rule.py: a candidate is judged only against its keeper
    timed beside it, never against a figure recorded at another time)."""
    if a.best_median is not None:
        raise Refused("--best-median is not used any more: a candidate is judged only against its keeper timed beside "
                      "it (harness/keep_rule.py), never against a figure; measure without it")
    cand = Path(os.path.abspath(a.candidate)) if a.candidate else _common.root() / goals["candidate"]
    try:  # no link followed (harness/sandbox/snapshot.py); the session reads it so too, and sends the worker its bytes
        source = snapshot.read(cand, _common.root())
    except FileNotFoundError:
        raise Refused(f"candidate file not found: {cand}") from None
    except snapshot.nofollow.NotPlain as e:
        raise Refused(str(e)) from None
    device = a.device or _common.default_device()
    preset = _common.pick_preset(goals, a.preset, device)
    rows = records.read_rows()
    gpu = _common.env_info(device, goals.presets[preset].ranks)["gpu"]
    frozen = _common.frozen_files()
    fh = _common.frozen_hash(frozen)
    code = code_files(frozen)
    base = records.baseline_row(rows, preset, gpu)
    first = a.rebaseline or base is None
    if not first:
        check_frozen(base, fh)
    better = goals.better
    best = None if first else records.best_row(rows, preset, gpu, better)
    current = None if first else records.current_row(rows, preset, gpu)
    keeper_dir = None
    if first:
        keeper = BASELINE
    elif rerun_of(_common.sha256_bytes(source)[:16], best, current):
        keeper = None
    else:
        keeper, keeper_dir = keeper_file(current, goals)
        if keeper is None:
            raise Refused(f"the current keeper {current['exp']}'s source is in neither records/{current['exp']}.json nor "
                          f"its commit {current['commit']}, so the candidate cannot be timed beside it; restore records/ "
                          f"(python harness/records.py restore), or (a person) start a new comparison with --rebaseline")
    t0 = time.perf_counter()
    try:
        recs = _measure_files(a, goals, preset, device, fh, keeper, cand, first, (best, current))
    finally:
        if keeper_dir is not None:
            shutil.rmtree(keeper_dir, ignore_errors=True)
    if any(r["candidate_file"] == str(cand) and r.get("source") not in (None, source.decode(errors="replace"))
           for r in recs):
        raise Refused(f"{cand.name} changed while it was being measured (read twice, two versions). Nothing "
                      "recorded; run it again and leave the file alone until it finishes.")
    after = code_files(_common.frozen_files())
    if after != code:
        changed = sorted(k for k in set(code) | set(after) if code.get(k) != after.get(k))
        kind = "frozen" if changed[0] in frozen else "harness"
        for rec in recs:
            rec.update(outcome="tampered", reason=f"{kind} file {changed[0]} changed during the run "
                       f"({len(changed)} changed); the run is void")
    if first and recs[0]["outcome"] != "measured":
        recs = recs[:1]  # without a baseline there is nothing to judge the candidate against
    for rec in recs:
        rec["wall_s"] = time.perf_counter() - t0
    return recs


def keeper_file(current: dict[str, str] | None, goals: dict[str, Any]) -> tuple[Path | None, Path | None]:
    """The current keeper's source as a file to measure beside the candidate (a private temporary
    folder, removed after), and that folder: the baseline's file, or the source its record holds,
    else the candidate file as its row's commit holds it; (None, None) when neither is its code."""
    if current is None:
        return None, None
    if current["status"] == "baseline":
        return (BASELINE, None) if _common.sha256_bytes(BASELINE.read_bytes())[:16] == current["candidate_sha"] else (None, None)
    source = _recorded_source(current["exp"])
    if source is None or _common.sha256_bytes(source.encode())[:16] != current["candidate_sha"]:
        source = _committed_source(current.get("commit", "-"), goals)
    if source is None or _common.sha256_bytes(source.encode())[:16] != current["candidate_sha"]:
        return None, None
    folder = Path(tempfile.mkdtemp(prefix="auto-optim-keeper-"))
    path = folder / Path(goals["candidate"]).name
    path.write_text(source)
    return path, folder


def _recorded_source(exp: str) -> str | None:
    try:
        source = json.loads((_common.root() / "records" / f"{exp}.json").read_text())["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source if isinstance(source, str) else None


def code_files(frozen: dict[str, str]) -> dict[str, str]:
    """What the tamper check compares before and after a run: the frozen files and every other file
    of the harness (the frozen hash leaves out the commands and the ledger, which say what a row
    means but do not measure it; a run during which any of them changes is void all the same)."""
    harness = Path(__file__).resolve().parents[1]
    out = dict(frozen)
    for f in sorted(harness.rglob("*.py")):
        if "__pycache__" not in f.parts:
            out.setdefault(str(Path("harness") / f.relative_to(harness)), _common.sha256_file(f))
    return out


def _committed_source(commit: str, goals: dict[str, Any]) -> str | None:
    """The candidate file as a keeper's commit holds it (a keep commits its source as the candidate)."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit or ""):
        return None
    repo = git_repo()
    if repo is None:
        return None
    blob = git_plumbing.show(repo, commit, os.path.relpath(_common.root() / goals["candidate"], repo))
    return blob.decode(errors="replace") if blob is not None else None


def _measure_files(a: argparse.Namespace, goals: dict[str, Any], preset: str, device: str, fh: str,
                   keeper: Path | None, cand: Path, first: bool,
                   keepers: tuple[Any, Any]) -> list[dict[str, Any]]:
    """One record per measured file: [baseline, candidate] on a first run, else [candidate]."""
    from harness.measure.alternate import CandidateDidNotStart, measure_pair, started  # lazy: --apply and --help need no torch
    from harness.measure.session import Session

    options = {"unsandboxed": a.unsandboxed, "timeout": a.timeout}
    broken = compile_error(cand)  # before any worker starts: compiling runs none of its code
    if broken:
        print(f"run_experiment: {broken}; recorded as a crash, no worker of its own started"
              + ("; first the baseline this machine needs" if first else ""), file=sys.stderr, flush=True)
    try:  # first, while no other worker is alive (harness/measure/memory_limit.py)
        fits = None if broken else memory_check(goals, preset, device, cand, options)
    except _common.SetupError as e:
        raise Refused(str(e)) from None

    def new_rec(path: Path, desc: str, is_baseline: bool) -> dict[str, Any]:
        return {"desc": desc, "preset": preset, "device": device, "frozen_hash": fh, "timestamp": records.utc_now(),
                "rebaseline": is_baseline, "candidate_file": str(path), "profile_md": None, "profile": None,
                "strip_png": None, "gpu_index": device_slot()}

    def fill(rec: dict[str, Any], s: Any, facts: dict[str, Any]) -> None:
        out = facts.pop("_bench_out", None)
        if fits is not None and not rec["rebaseline"]:
            facts["memory_check"] = fits.as_fact()
        rec["source"] = s.source.decode()
        rec["candidate_sha"] = _common.sha256_bytes(s.source)[:16]
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
        rec.update(source=source.decode(errors="replace"), candidate_sha=_common.sha256_bytes(source)[:16],
                   facts={"gpu": _common.env_info(device, ranks)["gpu"], "passed": False, "status": "crash",
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
        try:
            return crashed(recs[-1], f"the candidate's worker did not start (its module is imported then): {e}")
        except _common.SetupError as e2:
            raise Refused(str(e2)) from None
    except _common.SetupError as e:
        raise Refused(str(e)) from None
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
                      f"{len(s.pool)} inputs, they need {need}; remake it (python harness/target/make_reference.py --only pool "
                      f"--force) with goals.json pool.size >= {need}")
    return want
def profile_md(s: Any, facts: dict[str, Any], goals: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The keeper's profile as markdown, and the figures the stop rule reads (harness/floor.py)."""
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
        from harness import plots  # lazy: matplotlib inside
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


def parser() -> argparse.ArgumentParser:
    """The options (harness/cli/person.py reads the person's powers from what this parser makes)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("--desc", help="what this experiment changes (required unless --apply)")
    p.add_argument("--preset")
    p.add_argument("--candidate", type=Path, help="default: goals.json's candidate (optimize.py); never modified")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--timeout", type=_common.seconds, help="seconds allowed for the build and for each call")
    p.add_argument("--no-profile", action="store_true", help="skip profiling a keeper")
    p.add_argument("--unsandboxed", action="store_true",
                   help="run the candidate without a sandbox where none can be had (the row says so)")
    p.add_argument("--rebaseline", action="store_true",
                   help="a person starts a new comparison: a fresh fp32 eager baseline row, then the candidate")
    p.add_argument("--measure-only", action="store_true", help="measure, write --record-out, record nothing")
    p.add_argument("--record-out", type=Path)
    p.add_argument("--best-median", type=float, help="with --measure-only: the best metric to beat")
    p.add_argument("--apply", type=Path, metavar="RECORD.json", help="record a --measure-only result here")
    return p


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))


def run(a: argparse.Namespace) -> int:
    """One experiment, a --measure-only record or an --apply, as parsed (harness/cli/door.py builds its
    Namespace from request.json, never from a command line)."""
    try:
        goals = _common.load_goals()
        # Measuring alone (a wave member, a cloud run) records nothing: it needs only its GPU.
        lock = None if a.measure_only else acquire_lock()
        if not a.measure_only:
            check_committed(git_repo(), goals)
        if a.apply:
            recs = read_record_file(a.apply, goals)
        else:
            if not a.desc or not a.desc.strip():
                raise Refused("--desc is required: say what this experiment changes")
            if a.measure_only and not a.record_out:
                raise Refused("--measure-only needs --record-out FILE.json")
            if a.record_out:
                check_record_out(a.record_out)
            if not a.measure_only:
                records.check_complete()  # before minutes of measuring: apply checks again under its lock
            preset = _common.pick_preset(goals, a.preset, a.device or _common.default_device())
            with device_lock(goals.presets[preset].ranks):
                recs = measure(a, goals)
            for rec in recs:
                rec["no_profile"] = a.no_profile
            if a.measure_only:
                write_record_file(a.record_out, recs)
                _common.emit([f"record written to {a.record_out}: " + ", ".join(f"{r['desc']!r} {r['outcome']}"
                        + (f" (would be {r['would_be']})" if "would_be" in r else "") for r in recs),
                        f"apply it in the git checkout: python harness/cli/run_experiment.py --apply {a.record_out.name}"],
                       {"record": str(a.record_out), "outcomes": [r["outcome"] for r in recs]})
                return 0
        results, code = [], 0
        for rec in recs:
            done, facts = apply(rec, goals, a.rebaseline and rec is recs[0])
            code = max(code, done)
            results.append(facts)
        lock.close()
    except (Refused, _common.SetupError) as e:
        print(f"run_experiment: refused: {e}", file=sys.stderr)
        _common.emit([f"REFUSED: {e}"], {"status": "refused", "reason": str(e)})
        return 2
    except OSError as e:  # the disk or its permissions (records, results.tsv, a keeper's copy): not the candidate's
        if e.errno not in DISK_ERRORS:
            raise
        why = (f"{disk_error(e)}; the rows recorded before it stay (python harness/records.py restore puts back "
               f"what a half-written experiment left out of results.tsv or records/)")
        print(f"run_experiment: {why}", file=sys.stderr)
        _common.emit([f"REFUSED: {why}"], {"status": "refused", "reason": why})
        return 2
    last = results[-1]
    _common.emit(summary(results, goals), {"exp": last["exp"], "status": last["status"], "exps": [r["exp"] for r in results],
                                     **{k: v for k, v in last["row"].items() if k not in ("exp", "status")},
                                     "best_before": last["best"]["exp"] if last["best"] else None,
                                     "reason": last.get("reason"), "restore": last.get("note"), "verdict": last.get("verdict")})
    return code


if __name__ == "__main__":
    from harness.cli import person

    person.refuse_agent(parser(), sys.argv[1:], "harness/cli/run_experiment.py")
    sys.exit(_common.run_cli(main, "run_experiment", "nothing recorded for the experiment in progress; "
                                               "the rows recorded before it stay"))
