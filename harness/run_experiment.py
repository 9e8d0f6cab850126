"""Run one experiment: measure in one sandboxed worker -> decide -> record (-> commit + profile).

Usage:
    python harness/run_experiment.py --desc "bf16 weights" [--preset P] [--candidate FILE]
                                     [--device cpu|cuda] [--timeout S] [--no-profile] [--unsandboxed]
    python harness/run_experiment.py --desc "..." --measure-only --record-out rec.json [--best-median S]
    python harness/run_experiment.py --apply rec.json
    add --rebaseline (a person, on purpose) to start a new comparison: a new baseline row first

The baseline. The first run on a machine (no baseline row yet for this preset and GPU model), or
a run with --rebaseline, first measures the frozen model's own fp32 eager forward
(harness/baselines/fp32_eager.py) and records it as the `baseline` row; then the candidate is
measured against it. So the first thing a user sees is a true ratio over fp32 eager.

The keep rule. A candidate is kept only if every call passed the gate and its metric (goals.json
"metric": a median latency, or a throughput) beats the best keeper since that baseline by more
than the noise threshold and by more than either one's spread; or, where goals.json has a
"warmup_gain", if its metric is no worse than the best's beyond the noise threshold and its
warm-up (build + first calls, in a fresh worker whose compiler caches start empty) is shorter than
the current keeper's (the latest keep, whose source optimize.py holds) by at least that
fraction. A keeper's source becomes optimize.py (goals.json "candidate") and is committed, then
profiled in the same worker. Anything else leaves optimize.py at the current keeper: after a
revert of an edited optimize.py it is put back; a --candidate file is never modified. The best or
the current keeper's own source measured again (on a fresh machine, say) is a `rerun`, with its
distance from that keeper.

Every attempt appends exactly one row to results.tsv (baseline, keep, revert, rerun, gate_fail,
crash, timeout, tampered) with the experiment's wall time and the sandbox it ran in, writes its
record to records/<exp>.json (the source, every figure, the profile and quality strip of a
keeper), regenerates leaderboard.md and this machine's progress/<preset>-<machine>.png and adds a
line to PROGRESS.md.

Tamper check: the frozen files (harness/, model/, goals.json) are hashed before and after; a
change during the run voids it (status `tampered`, nothing kept or committed). A run refuses to
start when the frozen files differ from the baseline's.

Locks (runs/). run_experiment.lock: one experiment or one wave (harness/wave.py) per checkout; a
second refuses at once. device_<i>.lock: whoever measures on GPU i (CUDA_VISIBLE_DEVICES's first
entry, else 0) holds it, and a second measurement there waits. records.lock: held by apply from
reading results.tsv to the last write, so writers that finish together stay whole.

Record-file mode, for a GPU machine without .git: --measure-only measures (and profiles a
would-be keeper, judged against --best-median or results.tsv there) and writes a JSON record,
signed with the person's key (harness/signing.py; give that machine a copy of the key folder
through AUTO_OPTIM_KEY_DIR); --apply does the bookkeeping half in the git checkout, for a record
that key signed only, and checks every field of it (read_record_file, validate_record).
--apply, --record-out, --measure-only, --unsandboxed and --rebaseline are the person's: Claude
Code's hook (harness/hooks/guard_frozen.py) refuses them to the agent.
Exit: 0 measured and recorded (baseline, keep, revert, rerun: the candidate passed every check,
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

sys.path.append(str(Path(__file__).resolve().parent.parent))  # last: see _common
from harness import _common as C  # noqa: E402
from harness import floor  # noqa: E402
from harness import keep_rule  # noqa: E402
from harness import records as R  # noqa: E402
from harness import signing  # noqa: E402
from harness.replies import markdown  # noqa: E402

HARNESS = Path(__file__).resolve().parent
BASELINE = HARNESS / "baselines" / "fp32_eager.py"
BASELINE_DESC = "baseline: the frozen model, fp32 eager (PyTorch defaults), on this machine"


class Refused(Exception):
    """Nothing is recorded: frozen files changed, broken setup, bad arguments, a run in progress."""


def judge(rec: dict[str, Any], goals: dict[str, Any], best: dict[str, Any] | None, current: dict[str, Any] | None,
          figure: float | None = None) -> keep_rule.Verdict:
    """The keep rule (harness/keep_rule.py) on a measured record: the measuring half's "would be"
    and apply's row both come from here."""
    return keep_rule.judge_record(rec, goals, best, current, figure, C.root() / "records")


def metric_of(facts: dict[str, Any], goals: dict[str, Any], preset: str) -> tuple[float, float]:
    """(metric, its spread) from a session's timings: seconds, or work per second."""
    spec = R.metric_spec(goals)
    if spec.get("better", "lower") == "lower":
        return facts["median_s"], facts["spread_s"]
    work = float(goals["presets"][preset].get("work_per_call", 1))
    return work / facts["median_s"], work / facts["min_s"] - work / facts["max_s"]


rerun_of = keep_rule.rerun_of


def acquire_lock() -> Any:
    """One experiment (or one wave, harness/wave.py) at a time per checkout: a second one refuses
    at once instead of measuring beside the first (both numbers would be wrong)."""
    f = R.lock_file(C.root() / "runs" / "run_experiment.lock", wait=False)
    if isinstance(f, str):
        raise Refused(f"another experiment is running in this checkout ({f}); wait for it to finish")
    return f


def device_slot() -> str:
    """The GPU this process measures on, as the wave names it: CUDA_VISIBLE_DEVICES's first entry
    (a wave member's), else 0 (torch's default device). On a CPU a wave gives each member a slot too."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    return re.sub(r"[^\w-]", "", first) or "0"


def device_lock() -> Any:
    """Two measurements never share a GPU: whoever measures holds runs/device_<slot>.lock, and a
    second measurement on that GPU waits for it (a wave's members queue this way)."""
    path = C.root() / "runs" / f"device_{device_slot()}.lock"
    f = R.lock_file(path, wait=False)
    if isinstance(f, str):
        print(f"run_experiment: GPU {device_slot()} is measuring ({f}); waiting for it", file=sys.stderr)
        f = R.lock_file(path, wait=True)
    return f


# --- the measuring half ------------------------------------------------------------------------

def measure(a: argparse.Namespace, goals: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU half: a baseline record first when this machine has none, then the candidate's.
    The candidate is timed in alternation with the code it would replace (harness/alternate.py):
    the current keeper, or on a first run the baseline itself; alone when it re-runs a keeper, when
    --best-median names the figure to beat, or when the keeper's source is nowhere to be found."""
    device = a.device or C.default_device()
    preset = C.pick_preset(goals, a.preset, device)
    cand = (a.candidate or C.root() / goals["candidate"]).resolve()
    if not cand.is_file():
        raise Refused(f"candidate file not found: {cand}")
    rows = R.read_rows()
    gpu = C.env_info(device)["gpu"]
    frozen = C.frozen_files()
    fh = C.frozen_hash(frozen)
    base = R.baseline_row(rows, preset, gpu)
    first = a.rebaseline or base is None
    if not first:
        check_frozen(base, fh)
    better = R.metric_spec(goals).get("better", "lower")
    best = None if first else R.best_row(rows, preset, gpu, better)
    current = None if first else R.current_row(rows, preset, gpu)
    keeper_dir = None
    if first:
        keeper = BASELINE
    elif a.best_median is not None or rerun_of(C.sha256_bytes(cand.read_bytes())[:16], best, current):
        keeper = None
    else:
        keeper, keeper_dir = keeper_file(current, goals)
    t0 = time.perf_counter()
    try:
        recs = _measure_files(a, goals, preset, device, fh, keeper, cand, first, (best, current))
    finally:
        if keeper_dir is not None:
            shutil.rmtree(keeper_dir, ignore_errors=True)
    after = C.frozen_files()
    if after != frozen:
        changed = sorted(k for k in set(frozen) | set(after) if frozen.get(k) != after.get(k))
        for rec in recs:
            rec.update(outcome="tampered", reason=f"frozen file {changed[0]} changed during the run "
                       f"({len(changed)} changed); the run is void")
    if first and recs[0]["outcome"] != "measured":
        recs = recs[:1]  # without a baseline there is nothing to judge the candidate against
    for rec in recs:
        rec["wall_s"] = time.perf_counter() - t0
    return recs


def keeper_file(current: dict[str, str] | None, goals: dict[str, Any]) -> tuple[Path | None, Path | None]:
    """The current keeper's source as a file to measure beside the candidate (a private temporary
    folder, removed after), and that folder: the baseline's file, or the source its record holds."""
    if current is None:
        return None, None
    if current["status"] == "baseline":
        return (BASELINE, None) if C.sha256_bytes(BASELINE.read_bytes())[:16] == current["candidate_sha"] else (None, None)
    try:
        source = json.loads((C.root() / "records" / f"{current['exp']}.json").read_text())["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, None
    if not isinstance(source, str) or C.sha256_bytes(source.encode())[:16] != current["candidate_sha"]:
        return None, None
    folder = Path(tempfile.mkdtemp(prefix="auto-optim-keeper-"))
    path = folder / Path(goals["candidate"]).name
    path.write_text(source)
    return path, folder


def _measure_files(a: argparse.Namespace, goals: dict[str, Any], preset: str, device: str, fh: str,
                   keeper: Path | None, cand: Path, first: bool,
                   keepers: tuple[Any, Any]) -> list[dict[str, Any]]:
    """One record per measured file: [baseline, candidate] on a first run, else [candidate]."""
    from harness.alternate import measure_pair  # lazy: --apply and --help need no torch
    from harness.session import Session

    def new_rec(path: Path, desc: str, is_baseline: bool) -> dict[str, Any]:
        return {"desc": desc, "preset": preset, "device": device, "frozen_hash": fh, "timestamp": R.utc_now(),
                "rebaseline": is_baseline, "candidate_file": str(path), "profile_md": None, "profile": None,
                "strip_png": None, "gpu_index": device_slot()}

    def fill(rec: dict[str, Any], s: Any, facts: dict[str, Any]) -> None:
        out = facts.pop("_bench_out", None)
        rec["source"] = s.source.decode()
        rec["candidate_sha"] = C.sha256_bytes(s.source)[:16]
        rec["facts"] = facts
        rec["outcome"] = "measured" if facts["passed"] else facts["status"]
        rec["reason"] = facts["reason"]
        if facts["passed"]:
            rec["metric"], rec["metric_spread"] = metric_of(facts, goals, preset)
            rec["would_be"] = "baseline" if rec["rebaseline"] else judge(rec, goals, *keepers, figure).status
            if not rec["rebaseline"]:
                rec["strip_png"] = quality_strip_b64(s, out, rec["desc"])
            if rec["would_be"] == "keep" and not a.no_profile:  # the baseline is the frozen model
                rec["profile_md"], rec["profile"] = profile_md(s, facts, goals)
                if not facts["passed"]:  # a profiled call is checked like the others
                    rec.update(outcome=facts["status"], reason=facts["reason"])
        floor.annotate(facts, goals, s.adapter, list(s.bench_x.shape), floor.load_peak(facts["gpu"]))

    recs = ([new_rec(BASELINE, BASELINE_DESC, True)] if first else []) + [new_rec(cand, a.desc, False)]
    figure = None if first else a.best_median
    options = {"unsandboxed": a.unsandboxed, "timeout": a.timeout}
    try:
        if keeper is None:
            with Session(cand, preset, device, **options) as s:
                fill(recs[-1], s, s.measure(want_frame=True))
            return recs
        with Session(keeper, preset, device, **options) as k, \
                Session(cand, preset, device, assets_from=k, **options) as s:
            kf, cf = measure_pair(k, s, pairs(goals, preset, s), want_frame=True)
            if first:
                fill(recs[0], k, kf)
                if not kf["passed"]:
                    return recs[:1]  # without a baseline there is nothing to judge the candidate against
                b = recs[0]  # what the candidate is judged against: this baseline, not yet a row
                keepers = ({"status": "baseline", "exp": "the baseline", "metric": str(b["metric"]),
                            "median_s": str(kf["median_s"]), "candidate_sha": b["candidate_sha"],
                            "warmup_s": kf.get("warmup_s")},) * 2
            fill(recs[-1], s, cf)
    except C.SetupError as e:
        raise Refused(str(e)) from None
    return recs


def pairs(goals: dict[str, Any], preset: str, s: Any) -> int:
    """Timed pairs: the preset's timed_runs, at least keep_rule.MIN_PAIRS, as far as the pool allows
    (each call gets a fresh input; a keeper's profile takes two more)."""
    want = max(keep_rule.MIN_PAIRS, int(goals["presets"][preset].get("timed_runs", C.MIN_RUNS)))
    return max(C.MIN_RUNS, min(want, len(s.pool) + 1 - s.warmup - 2))
def profile_md(s: Any, facts: dict[str, Any], goals: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The keeper's profile as markdown, and the figures the stop rule reads (harness/floor.py)."""
    from harness import profile

    summary = s.profile(facts)
    if summary is None:
        return f"profile failed: {facts.get('reason')}\n", None
    floor.annotate(facts, goals, s.adapter, list(s.bench_x.shape), floor.load_peak(facts["gpu"]))
    r = profile.report(summary, facts)
    return profile.to_markdown(r, "pending"), {k: r[k] for k in ("busy_fraction", "outside_largest", "largest_category", "kernel_time_s", "launches")}


def quality_strip_b64(s: Any, out: Any, desc: str) -> str | None:
    """The strip PNG (base64, so it travels in a JSON record) from the benchmark output's worst frame."""
    if out is None or not hasattr(s.adapter, "frames"):
        return None
    try:
        from harness import plots  # lazy: matplotlib inside
        from harness.verify import worst_frame

        f = worst_frame(s.adapter, out, s.bench_ref.cpu(), s.goals["gate"])
        png = C.root() / "runs" / f"strip_{os.getpid()}.png"
        png.parent.mkdir(parents=True, exist_ok=True)
        title = (f"{desc}\nframe {f['index']} of {f['count']}, the one furthest from the reference: "
                 f"{s.goals['gate'].get('quality_name', 'quality')} {f['quality']:.1f}")
        plots.quality_strip(f["reference"], f["candidate"], png, title=title)
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        png.unlink()
        return data
    except ImportError as e:
        print(f"run_experiment: quality strip skipped ({e})", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a picture must never lose a record
        print(f"run_experiment: quality strip failed: {type(e).__name__}: {e}", file=sys.stderr)
    return None


def check_committed(repo: Any, goals: dict[str, Any]) -> None:
    """A revert restores the candidate from git and every row names a commit, so the target's files
    (goals file, candidate, adapter package) must be committed: refused up front, in one line, not a
    GitCommandError after the baseline row."""
    if repo is None:
        return
    top = Path(repo.working_tree_dir).resolve()
    files = [C.goals_path(), C.root() / goals["candidate"], C.root() / goals["adapter"].split(".")[0]]
    rel = [os.path.relpath(p, top) for p in files if p.exists() or p.is_symlink()]
    committed = repo.git.ls_tree("-r", "--name-only", "HEAD", "--", *rel).splitlines() if repo.head.is_valid() else []
    missing = [r for r in rel if not any(c == r or c.startswith(r + "/") for c in committed)]
    missing += repo.git.ls_files("--others", "--exclude-standard", "--", *rel).splitlines()
    if missing:
        raise Refused(f"{', '.join(dict.fromkeys(missing))} not committed: a revert restores {goals['candidate']} from "
                      f"git and each row names a commit; commit the target first (git add {os.path.relpath(C.root(), top)} "
                      f"&& git commit), then run again")


def check_frozen(base: dict[str, str] | None, fh: str) -> None:
    if base and base["frozen_hash"] != fh:
        raise Refused(
            f"the frozen files (harness/, model/, goals.json) hash to {fh}, but baseline {base['exp']} "
            f"was recorded with {base['frozen_hash']}: numbers would not be comparable. Undo the change "
            f"to the frozen files, or (a person, on purpose) rerun with --rebaseline to start a new baseline.")


# --- record files -------------------------------------------------------------------------------

def check_record_out(path: Path) -> None:
    """A record file is a new .json outside the files the harness trusts (its code, goals, records)."""
    out = path.resolve()
    trusted = [HARNESS, *(C.root().resolve() / d for d in ("harness", "records", "profiles", "quality"))]
    if out.suffix != ".json" or out == C.goals_path() or any(out.is_relative_to(t) for t in trusted):
        raise Refused(f"--record-out {path}: a record goes to a .json file of its own, not over goals.json, "
                      "harness/, records/, profiles/ or quality/")


def write_record_file(path: Path, recs: list[dict[str, Any]]) -> None:
    """A --measure-only result: the experiments and their signature (harness/signing.py)."""
    body = {"experiments": recs}
    C.atomic_write(path, json.dumps({**body, "signature": signing.sign(body)}, indent=1, default=str))


def read_record_file(path: Path, goals: dict[str, Any]) -> list[dict[str, Any]]:
    """The experiments of a record file that this key signed, each field checked; else Refused."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise Refused(f"cannot read record {path}: {e}") from None
    body = {"experiments": data.get("experiments")} if isinstance(data, dict) else None
    if body is None or not signing.verify(body, data.get("signature")):
        raise Refused(f"record {path} is not signed with this person's key ({signing.key_path()}): only a record "
                      "that run_experiment.py --measure-only wrote with it can be applied")
    recs = body["experiments"]
    if not isinstance(recs, list) or not recs:
        raise Refused(f"record {path} holds no experiments")
    for rec in recs:
        validate_record(rec, goals)
    return recs


HEX = re.compile(r"^[0-9a-f]{8,64}$")
OUTCOMES = ("measured", *R.RED)


def _text(v: Any) -> bool:
    """One line of text: a results.tsv cell or a log line (no tab, newline or other control)."""
    return isinstance(v, str) and not any(ord(c) < 32 or ord(c) == 127 for c in v)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _seconds_list(v: Any) -> bool:
    """Timed calls' seconds: what the keep rule reads from a record (facts.times_s, facts.paired)."""
    return isinstance(v, list) and 0 < len(v) <= 1000 and all(_number(t) and t > 0 for t in v)


def _optional(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _base64(v: Any) -> bool:
    try:
        base64.b64decode(v, validate=True)
        return True
    except (TypeError, ValueError):
        return False


# Every field _apply reads from a record, and what it must be. No field is ever used as a path.
RECORD_FIELDS: dict[str, Any] = {
    "desc": lambda v: _text(v) and v.strip() != "",
    "preset": _text,  # and a preset of goals.json: validate_record
    "outcome": lambda v: v in OUTCOMES,
    "frozen_hash": lambda v: isinstance(v, str) and bool(HEX.match(v)),
    "timestamp": _text,
    "facts": lambda v: isinstance(v, dict),
    "candidate_sha": _optional(lambda v: isinstance(v, str) and bool(HEX.match(v))),
    "candidate_file": _optional(_text),
    "source": _optional(lambda v: isinstance(v, str)),
    "rebaseline": _optional(lambda v: isinstance(v, bool)),
    "no_profile": _optional(lambda v: isinstance(v, bool)),
    "metric": _optional(_number),
    "metric_spread": _optional(_number),
    "wall_s": _optional(_number),
    "reason": _optional(lambda v: isinstance(v, str)),
    "profile_md": _optional(lambda v: isinstance(v, str)),
    "profile": _optional(lambda v: isinstance(v, dict)),
    "strip_png": _optional(_base64),
}
FACT_NUMBERS = ("median_s", "spread_s", "min_s", "max_s", "warmup_s", "max_abs")
FACT_TEXT = ("gpu", "weights_kind", "torch", "cuda", "cudnn", "sandbox")


def validate_record(rec: Any, goals: dict[str, Any]) -> None:
    """Refused unless every field _apply uses has the type and range the measuring half gives it."""
    if not isinstance(rec, dict):
        raise Refused("a record must be a JSON object")
    bad = [k for k, ok in RECORD_FIELDS.items() if not ok(rec.get(k))]
    facts = rec.get("facts") if isinstance(rec.get("facts"), dict) else {}
    bad += [f"facts.{k}" for k in FACT_NUMBERS if not _optional(_number)(facts.get(k))]
    quality = facts.get("quality")  # a PSNR is infinite for an output equal to its reference
    if quality is not None and not (_number(quality) or quality in (float("inf"), float("-inf"))):
        bad.append("facts.quality")
    bad += [f"facts.{k}" for k in FACT_TEXT if facts.get(k) is not None and not _text(str(facts[k]))]
    times = facts.get("times_s")
    if times is not None and not _seconds_list(times):
        bad.append("facts.times_s")
    paired = facts.get("paired")
    if paired is not None and not (isinstance(paired, dict) and isinstance(paired.get("keeper_sha"), str)
                                   and bool(HEX.match(paired["keeper_sha"])) and _seconds_list(paired.get("keeper_times_s"))
                                   and isinstance(times, list) and len(paired["keeper_times_s"]) == len(times)
                                   and all(_optional(_number)(paired.get(k)) for k in ("keeper_warmup_s", "keeper_median_s"))):
        bad.append("facts.paired")
    if rec.get("preset") not in goals["presets"]:
        bad.append("preset (not a preset of goals.json)")
    if rec.get("outcome") == "measured" and not (_number(rec.get("metric")) and _number(rec.get("metric_spread"))
                                                 and _number(facts.get("median_s")) and isinstance(rec.get("source"), str)
                                                 and rec.get("candidate_sha")):
        bad.append("a measured record's metric, median_s, source and candidate_sha")
    if bad:
        raise Refused(f"the record's {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not what run_experiment writes")


# --- the bookkeeping half ----------------------------------------------------------------------

def _git_repo() -> Any:
    try:
        import git  # lazy: the GPU machine has no GitPython
    except ImportError:
        return None
    try:
        return git.Repo(C.root(), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def _commit(repo: Any, paths: list[Path], message: str) -> str:
    top = Path(repo.working_tree_dir).resolve()
    rel = [str(p.resolve().relative_to(top)) for p in paths if p.exists()]
    repo.git.add("--", *rel)
    ident = []
    if not repo.git.config("user.email", with_exceptions=False):
        ident = ["-c", "user.name=auto-optim", "-c", "user.email=auto-optim@localhost"]
    if repo.head.is_valid() and not repo.git.diff("HEAD", "--cached", "--", *rel):
        # Nothing new to commit: the row names the commit that made these files what they are.
        return (repo.git.log("-1", "--format=%H", "--", *rel) or repo.head.commit.hexsha)[:10]
    repo.git.execute(["git", *ident, "commit", "-q", "-m", message, "--", *rel])
    return repo.head.commit.hexsha[:10]


def _head(repo: Any) -> str:
    return repo.head.commit.hexsha[:10] if repo is not None and repo.head.is_valid() else "nogit"


def _saved_best(preset: str) -> Path:
    return C.root() / "runs" / f"best_{preset}.py"


def restore(keeper: dict[str, str] | None, target: Path, preset: str, repo: Any) -> str:
    """Put the current keeper's source (R.current_row; saved at its keep) back into optimize.py;
    say where it came from."""
    saved = _saved_best(preset)
    if keeper is not None and keeper["status"] == "keep" and saved.is_file():
        source, where = saved.read_text(), f"{keeper['exp']}, the current keeper"
    elif repo is not None and keeper is not None and keeper["commit"] not in ("-", "nogit"):
        rel = target.resolve().relative_to(Path(repo.working_tree_dir).resolve()).as_posix()
        try:
            source = repo.git.show(f"{keeper['commit']}:{rel}", strip_newline_in_stdout=False)
        except Exception:  # noqa: BLE001 - GitCommandError: that commit does not hold the file
            return f"optimize.py left as it is: {rel} is not in {keeper['exp']}'s commit {keeper['commit']}"
        where = f"the version committed with {keeper['exp']} ({keeper['commit']})"
    else:
        return "optimize.py left as it is (no keeper to restore yet)"
    if target.read_text() == source:
        return f"optimize.py is already {where}"
    C.atomic_write(target, source)
    return f"optimize.py restored to {where}"


def apply(rec: dict[str, Any], goals: dict[str, Any], rebaseline: bool = False) -> tuple[int, dict[str, Any]]:
    """Decide against results.tsv, record, restore or commit. Returns (exit code, facts).
    Under the records lock: a wave or a second --apply never interleaves its rows and commits."""
    with R.records_lock():
        return _apply(rec, goals, rebaseline)


def _apply(rec: dict[str, Any], goals: dict[str, Any], rebaseline: bool) -> tuple[int, dict[str, Any]]:
    validate_record(rec, goals)
    target = (C.root() / goals["candidate"]).resolve()
    # Whether the target itself was measured (then a revert restores it): compared, never opened.
    measured_target = rec.get("candidate_file") in (None, str(target))
    rows = R.read_rows()
    R.check_complete()
    preset = rec["preset"]
    f = rec.get("facts") or {}
    gpu = f.get("gpu") or "?"
    is_baseline = rebaseline or bool(rec.get("rebaseline"))
    base = R.baseline_row(rows, preset, gpu)
    if not is_baseline:
        if base is None:
            raise Refused(f"no baseline row for preset {preset} on {gpu}: apply that machine's baseline record first")
        check_frozen(base, rec["frozen_hash"])
    if measured_target and "source" in rec and target.is_file() and target.read_text() != rec["source"] \
            and rec.get("outcome") != "tampered":
        raise Refused(f"{target.name} changed while it was being measured (the record holds other source). "
                      f"Nothing recorded; run it again and leave the file alone until it finishes.")
    better = R.metric_spec(goals).get("better", "lower")
    exp = R.next_exp_id(rows)
    best = None if is_baseline else R.best_row(rows, preset, gpu, better)
    current = None if is_baseline else R.current_row(rows, preset, gpu)
    status = rec["outcome"]
    verdict, reproduced = "", False
    if status == "measured":
        if is_baseline:
            status = "baseline"
        else:
            v = judge(rec, goals, best, current)
            status, verdict, reproduced = v.status, v.reason, v.reproduced
    base_row = base if not is_baseline else None
    speedup = None
    if status == "baseline":
        speedup = 1.0
    elif f.get("median_s") and base_row:
        speedup = float(base_row["median_s"]) / f["median_s"]  # the baseline row is fp32 eager
    record, prof, strip = (C.root() / d / f"{exp}.{ext}" for d, ext in (("records", "json"), ("profiles", "md"), ("quality", "png")))
    taken = [x for x in (record, prof, strip) if x.exists()]
    if taken:
        raise Refused(f"{taken[0].relative_to(C.root())} exists but results.tsv has no row {exp}: nothing is ever "
                      f"written over a record; run python harness/records.py restore")
    repo = _git_repo()
    note, commit = "", "-"
    if status == "keep":
        C.atomic_write(_saved_best(preset), rec["source"])
        if target.read_text() != rec["source"]:
            C.atomic_write(target, rec["source"])
        commit = _commit(repo, [target], _commit_msg(exp, f, goals, rec["desc"])) if repo is not None else "nogit"
    elif status == "baseline":
        commit = _head(repo)  # the frozen baseline file, as committed
        _saved_best(preset).unlink(missing_ok=True)
    elif measured_target:
        note = restore(current, target, preset, repo)
    # The record first, then the row made from it (R.row_from_record): a row is never without its record.
    entry = {**rec, "exp": exp, "status": status, "commit": commit, "speedup_vs_fp32": speedup, "verdict": verdict or None}
    C.atomic_write(record, json.dumps(entry, indent=1, default=str), exclusive=True)
    row = R.row_from_record(json.loads(record.read_text()))
    R.append_row(row)
    rows = R.read_rows()
    R.write_leaderboard(rows, goals=goals, here=(preset, gpu))
    why = rec.get("reason") or verdict
    R.append_progress(f"{exp} {status}: {_fmt_metric(rec, goals)}: {rec['desc']}" + (f" ({markdown(why)})" if why else ""))
    written = [R.results_path(), R.leaderboard_path(), R.progress_path(), C.root() / "records"]
    if status == "keep" and not rec.get("profile_md") and not rec.get("no_profile"):
        print(f"run_experiment: keeper {exp} has no profile in its record; "
              f"run python harness/profile.py --out profiles/{exp}.md", file=sys.stderr)
    if status in R.KEEPERS and rec.get("profile_md"):
        C.atomic_write(prof, rec["profile_md"].replace("# Profile: pending", f"# Profile: {exp} ({rec['desc']})", 1),
                       exclusive=True)
        written.append(prof)
    if status in R.KEEPERS and rec.get("strip_png"):
        C.atomic_write(strip, base64.b64decode(rec["strip_png"]), exclusive=True)
        written.append(strip)
    png = render_plot(goals, preset, gpu)
    if png:
        written.append(png)
    if status in R.KEEPERS and repo is not None:
        _commit(repo, written, f"{exp}: record and profile")
    return (1 if status in R.RED else 0), {
        "exp": exp, "status": status, "row": row, "best": best, "against": current, "note": note, "verdict": verdict, "reason": rec.get("reason"),
        "range_s": (f["min_s"], f["max_s"]) if f.get("min_s") is not None and f.get("max_s") is not None else None}


def _commit_msg(exp: str, f: dict[str, Any], goals: dict[str, Any], desc: str) -> str:
    q = f.get("quality")
    name = goals["gate"].get("quality_name", "quality")
    return f"{exp}: {f['median_s']:.4g} s" + (f", {name} {q:.4g}" if isinstance(q, (int, float)) else "") + f": {desc}"


def _fmt_metric(rec: dict[str, Any], goals: dict[str, Any]) -> str:
    if rec.get("metric") is None:
        return "-"
    spec = R.metric_spec(goals)
    return f"{rec['metric']:.4g} {spec.get('unit', '')}".strip()


def render_plot(goals: dict[str, Any], preset: str, gpu: str) -> Path | None:
    """This machine's picture (progress/<preset>-<machine>.png): never another machine's."""
    try:
        from harness import plots  # lazy: helper module with matplotlib inside
        out = plots.render_progress(R.results_path(), plots.progress_path(C.root(), preset, gpu), goals, preset, gpu)
        return Path(out) if out else None
    except ImportError as e:
        print(f"run_experiment: progress plot skipped ({e})", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a plot must never lose a record
        print(f"run_experiment: progress plot failed: {type(e).__name__}: {e}", file=sys.stderr)
    return None


# --- what a person reads -----------------------------------------------------------------------

def timing_line(r: dict[str, Any], goals: dict[str, Any], base: dict[str, Any] | None) -> str:
    """The median, the range and spread of the timed calls it came from, the quality, and the ratio
    to the baseline in force, with a plain word where the noise is larger than the difference."""
    row, spec = r["row"], R.metric_spec(goals)
    line = f"  {row['median_s']:.4g} s per call (median of the timed calls)"
    if spec.get("better") == "higher" and row.get("metric") is not None:
        line += f" = {row['metric']:.4g} {spec.get('unit', '')}"
    if r.get("range_s"):
        lo, hi = r["range_s"]
        line += f"; the calls ranged {lo:.4g}-{hi:.4g} s (spread {hi - lo:.4g} s, {(hi - lo) / row['median_s']:.0%} of the median)"
    if row.get("quality") is not None:
        line += f"; {goals['gate'].get('quality_name', 'quality')} {row['quality']:.4g} against the reference"
    if row.get("speedup_vs_fp32") is not None and r["status"] != "baseline":
        line += f"\n  {row['speedup_vs_fp32']:.2f}x the fp32 eager baseline on this machine"
        if base is not None and abs(float(base["median_s"]) - row["median_s"]) <= max(float(base["spread_s"]), row["spread_s"]):
            line += f" ({base['exp']}), within the noise: the timed calls spread more than the two medians differ"
    return line


def summary(results: list[dict[str, Any]], goals: dict[str, Any]) -> list[str]:
    """The last lines of a run: what each row says, in plain words, and what to do next."""
    lines = []
    rows = R.read_rows()
    for r in results:
        row = r["row"]
        what = f"{r['exp']}: {r['status'].upper()}  {row['desc']}"
        if row.get("median_s") is not None:
            upto = rows[:next(i for i, x in enumerate(rows) if x["exp"] == r["exp"]) + 1]
            what += "\n" + timing_line(r, goals, R.baseline_row(upto, row["preset"], row["gpu"]))
        if r.get("reason"):
            what += f"\n  why: {r['reason']}"
        if r.get("verdict"):
            what += f"\n  {r['verdict']}"
        if r.get("note"):
            what += f"\n  {r['note']}"
        lines.append(what)
    row = results[-1]["row"]
    if row["gpu"].startswith("CPU"):  # the stop rule's floor and profile figures mean nothing on a CPU
        lines.append("On a CPU the tiny preset checks the harness's logic end to end; optimize.py is written for a GPU, "
                     "so its speed here means little. Next: the same command on a GPU machine (README, 'On a GPU'), "
                     "or let Claude Code run the loop (README, 'Running it with Claude Code').")
        return lines
    stop, why, best = floor.verdict_for_rows(rows, goals, row["preset"], row["gpu"],
                                             floor.load_peak(row["gpu"]), C.load_adapter(goals), C.root() / "records")
    lines.append(f"Stop rule (program.md section 7) on {best}: " + ("STOP, every condition holds." if stop
                 else "not yet:\n" + "\n".join(f"  - {w}" for w in why)))
    lines.append("Next: read the keeper's profile (profiles/), change optimize.py, run this again "
                 "(program.md has the loop); leaderboard.md ranks this machine's keepers.")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--desc", help="what this experiment changes (required unless --apply)")
    p.add_argument("--preset")
    p.add_argument("--candidate", type=Path, help="default: goals.json's candidate (optimize.py); never modified")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--timeout", type=C.seconds, help="seconds allowed for the build and for each call")
    p.add_argument("--no-profile", action="store_true", help="skip profiling a keeper")
    p.add_argument("--unsandboxed", action="store_true",
                   help="run the candidate without a sandbox where none can be had (the row says so)")
    p.add_argument("--rebaseline", action="store_true",
                   help="a person starts a new comparison: a fresh fp32 eager baseline row, then the candidate")
    p.add_argument("--measure-only", action="store_true", help="measure, write --record-out, record nothing")
    p.add_argument("--record-out", type=Path)
    p.add_argument("--best-median", type=float, help="with --measure-only: the best metric to beat")
    p.add_argument("--apply", type=Path, metavar="RECORD.json", help="record a --measure-only result here")
    a = p.parse_args(argv)
    try:
        goals = C.load_goals()
        # Measuring alone (a wave member, a cloud run) records nothing: it needs only its GPU.
        lock = None if a.measure_only else acquire_lock()
        if not a.measure_only:
            check_committed(_git_repo(), goals)
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
                R.check_complete()  # before minutes of measuring: apply checks again under its lock
            with device_lock():
                recs = measure(a, goals)
            for rec in recs:
                rec["no_profile"] = a.no_profile
            if a.measure_only:
                write_record_file(a.record_out, recs)
                C.emit([f"record written to {a.record_out}: " + ", ".join(f"{r['desc']!r} {r['outcome']}"
                        + (f" (would be {r['would_be']})" if "would_be" in r else "") for r in recs),
                        f"apply it in the git checkout: python harness/run_experiment.py --apply {a.record_out.name}"],
                       {"record": str(a.record_out), "outcomes": [r["outcome"] for r in recs]})
                return 0
        results, code = [], 0
        for rec in recs:
            done, facts = apply(rec, goals, a.rebaseline and rec is recs[0])
            code = max(code, done)
            results.append(facts)
        lock.close()
    except (Refused, C.SetupError) as e:
        print(f"run_experiment: refused: {e}", file=sys.stderr)
        C.emit([f"REFUSED: {e}"], {"status": "refused", "reason": str(e)})
        return 2
    last = results[-1]
    C.emit(summary(results, goals), {"exp": last["exp"], "status": last["status"], "exps": [r["exp"] for r in results],
                                     **{k: v for k, v in last["row"].items() if k not in ("exp", "status")},
                                     "best_before": last["best"]["exp"] if last["best"] else None,
                                     "reason": last.get("reason"), "restore": last.get("note"), "verdict": last.get("verdict")})
    return code


if __name__ == "__main__":
    sys.exit(C.run_cli(main, "run_experiment", "nothing recorded for the experiment in progress; "
                                               "the rows recorded before it stay"))
