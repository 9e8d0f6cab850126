"""Run one experiment: verify -> bench -> decide -> record (-> git commit + profile for a keeper).

Usage:
    python harness/run_experiment.py --desc "bf16 weights" [--preset P] [--candidate FILE]
                                     [--device cpu|cuda] [--timeout S] [--bench-baseline] [--no-profile]
    python harness/run_experiment.py --desc "..." --measure-only --record-out rec.json [--best-median S]
    python harness/run_experiment.py --apply rec.json
    add --rebaseline (a person, on purpose) to accept changed frozen files (harness/, model/, goals.json)

The first recorded experiment of a preset is its baseline. Later ones are kept only if the gate
passes and the median beats the best keeper by more than the noise threshold (goals.json) and
by more than the measured spread; otherwise optimize.py is restored to the best keeper.
A candidate whose source is the best keeper's (same sha256) is a re-run, recorded as `rerun`
with its distance from that keeper's median (within the noise threshold or not): how a result is
reproduced on a fresh machine.
Every attempt appends exactly one row to results.tsv (keep, revert, rerun, gate_fail, crash,
timeout), regenerates leaderboard.md and progress.png and adds a line to PROGRESS.md. Keepers are
committed with git (optimize.py first, so the row can name that commit; then the records,
profiles/<exp>.md and quality/<exp>.png: reference | candidate | amplified difference on the
frame where the candidate is furthest from the reference).

Record-file mode, for a GPU machine without .git: --measure-only runs verify and bench (and the
profile of a would-be keeper, judged against --best-median or results.tsv there) and writes a JSON
record with everything, including the candidate's source; --apply does the bookkeeping half in
the git checkout.
Exit: 0 recorded keeper/baseline or a re-run within noise, 1 other recorded rows, 2 refused
(nothing recorded).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import _common as C  # noqa: E402
from harness import records as R  # noqa: E402

HARNESS = Path(__file__).resolve().parent
DEFAULT_TIMEOUT = 1800


class Refused(Exception):
    """Nothing is recorded: frozen files changed, broken setup, bad arguments."""


def decide(median: float, spread: float, best_median: float | None, best_spread: float, noise: float) -> str:
    """'baseline' when nothing is recorded yet; 'keep' only for a win beyond noise and spread."""
    if best_median is None:
        return "baseline"
    gain = best_median - median
    if median < best_median * (1 - noise) and gain > max(spread, best_spread):
        return "keep"
    return "revert"


def is_rerun(candidate_sha: str, best: dict[str, str] | None) -> bool:
    """The candidate is the best keeper's source, measured again."""
    return best is not None and best["candidate_sha"] == candidate_sha


def same_source(rec: dict[str, Any], tool: str, facts: dict[str, Any]) -> None:
    """Refuse when a tool ran other code than the source being recorded (the file was edited, or
    replaced by a sync, while the experiment ran)."""
    ran = facts.get("candidate_sha")
    if ran and not ran.startswith(rec["candidate_sha"]):
        raise Refused(f"the candidate changed while it was being measured: {tool} ran source {ran[:16]}, "
                      f"the record holds {rec['candidate_sha']}. Nothing recorded; run it again and leave "
                      f"the file alone until it finishes.")


def run_tool(script: str, args: list[str], timeout: float) -> tuple[str, dict[str, Any], str]:
    """Run a harness script in a clean process: ('ok'|'fail'|'setup'|'crash'|'timeout', facts, tail)."""
    cmd = [sys.executable, str(HARNESS / script), *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return "timeout", {"reason": f"{script} ran past {timeout:.0f} s"}, ""
    facts: dict[str, Any] = {}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                facts = json.loads(line)
            except json.JSONDecodeError:
                pass
            break
    tail = (p.stdout[-1500:] + "\n" + p.stderr[-3000:]).strip()
    kind = {0: "ok", 1: "fail", 2: "setup"}.get(p.returncode, "crash")
    if kind == "fail" and not facts:
        kind = "crash"  # an uncaught exception also exits 1, without the final JSON line
    if kind == "crash":
        facts.setdefault("reason", f"{script} exited {p.returncode}: {tail.splitlines()[-1] if tail else ''}")
    return kind, facts, tail


def _is_crash(facts: dict[str, Any]) -> bool:
    # verify's reasons for an exception in the candidate: "candidate raised ...", "candidate build raised ..."
    reason = str(facts.get("reason", "")).lower()
    return bool(facts.get("crashed")) or any(k in reason for k in ("candidate raised", "build raised", "crashed"))


def measure(a: argparse.Namespace, goals: dict[str, Any]) -> dict[str, Any]:
    """The GPU half: verify and bench in subprocesses, then profile a would-be keeper."""
    device = a.device or C.default_device()
    preset = C.pick_preset(goals, a.preset, device)
    cand = (a.candidate or C.root() / goals["candidate"]).resolve()
    if not cand.is_file():
        raise Refused(f"candidate file not found: {cand}")
    raw = cand.read_bytes()
    source = raw.decode()
    rows = R.read_rows()
    fh = C.frozen_hash()
    check_frozen(rows, preset, fh, a.rebaseline)
    best = R.best_row(rows, preset)
    best_median = a.best_median if a.best_median is not None else (float(best["median_s"]) if best else None)
    rec: dict[str, Any] = {"desc": a.desc, "preset": preset, "device": device, "frozen_hash": fh,
                           "candidate_sha": C.sha256_bytes(raw)[:16], "source": source,
                           "rebaseline": a.rebaseline, "timestamp": R.utc_now(), "verify": {},
                           "bench": {}, "profile_md": None}
    common = ["--preset", preset, "--candidate", str(cand)] + (["--device", a.device] if a.device else [])
    frames = C.root() / "runs" / f"frames_{os.getpid()}.pt"
    frames.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _measure(a, goals, rec, common, best, best_median, frames)
    finally:
        frames.unlink(missing_ok=True)


def _measure(a: argparse.Namespace, goals: dict[str, Any], rec: dict[str, Any], common: list[str],
             best: dict[str, str] | None, best_median: float | None, frames: Path) -> dict[str, Any]:
    kind, rec["verify"], tail = run_tool("verify.py", common + ["--frames-out", str(frames)], a.timeout)
    same_source(rec, "verify", rec["verify"])
    if kind == "setup":
        raise Refused(f"verify says the setup is broken: {rec['verify'].get('reason', tail[-300:])}")
    if kind != "ok":
        rec["outcome"] = {"fail": "crash" if _is_crash(rec["verify"]) else "gate_fail"}.get(kind, kind)
        rec["reason"] = rec["verify"].get("reason", tail[-300:])
        print(f"verify: {rec['outcome']}: {rec['reason']}", file=sys.stderr)
        return rec

    first = best_median is None or a.rebaseline
    bench_args = common + (["--baseline"] if first or a.bench_baseline else [])
    kind, rec["bench"], tail = run_tool("bench.py", bench_args, a.timeout)
    same_source(rec, "bench", rec["bench"])
    if kind == "setup":
        raise Refused(f"bench says the setup is broken: {rec['bench'].get('reason', tail[-300:])}")
    if kind != "ok":
        rec["outcome"] = "timeout" if kind == "timeout" else "crash"
        rec["reason"] = rec["bench"].get("reason", tail[-300:])
        print(f"bench: {rec['outcome']}: {rec['reason']}", file=sys.stderr)
        return rec
    rec["outcome"] = "measured"
    b = rec["bench"]
    if first:
        would = "baseline"
    elif is_rerun(rec["candidate_sha"], best):
        would = "rerun"
    else:
        would = decide(b["median_s"], b["spread_s"], best_median,
                       float(best["spread_s"]) if best and a.best_median is None else 0.0, goals["noise_threshold"])
    rec["would_be"] = would
    # Every measured record gets its strip (cheap): --apply may judge it a keeper even where this
    # machine's results.tsv did not.
    rec["strip_png"] = quality_strip_b64(frames, rec["desc"])
    if would in R.KEEPERS and not a.no_profile:
        out = C.root() / "runs" / f"profile_{os.getpid()}.md"
        kind, pf, tail = run_tool("profile.py", common + ["--out", str(out), "--title", "pending"], a.timeout)
        same_source(rec, "profile", pf)
        rec["profile_md"] = pf.get("markdown") if kind == "ok" else f"profile failed ({kind}): {tail[-500:]}\n"
        out.unlink(missing_ok=True)
    return rec


def quality_strip_b64(frames: Path, desc: str) -> str | None:
    """The strip PNG (base64, so it travels in a JSON record) from verify's worst frame."""
    if not frames.is_file():
        return None  # the adapter has no `frames`, or verify did not get that far
    try:
        import torch

        from harness import plots  # lazy: matplotlib inside

        f = torch.load(frames, weights_only=True)
        png = frames.with_suffix(".png")
        title = f"{desc}\nframe {f['index']} of {f['count']}, the one furthest from the reference: PSNR {f['psnr_db']:.1f} dB"
        plots.quality_strip(f["reference"], f["candidate"], png, title=title)
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        png.unlink()
        return data
    except ImportError as e:
        print(f"run_experiment: quality strip skipped ({e})", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a picture must never lose a record
        print(f"run_experiment: quality strip failed: {type(e).__name__}: {e}", file=sys.stderr)
    return None


def check_frozen(rows: list[dict[str, str]], preset: str, fh: str, rebaseline: bool) -> None:
    base = R.baseline_row(rows, preset)
    if base and base["frozen_hash"] != fh and not rebaseline:
        raise Refused(
            f"the frozen files (harness/, model/, goals.json) hash to {fh}, but baseline {base['exp']} "
            f"was recorded with {base['frozen_hash']}: numbers would not be comparable. Undo the change "
            f"to the frozen files, or (a person, on purpose) rerun with --rebaseline to start a new baseline.")


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
    rel = [str(p.resolve().relative_to(Path(repo.working_tree_dir).resolve())) for p in paths if p.exists()]
    repo.git.add("--", *rel)
    ident = []
    if not repo.git.config("user.email", with_exceptions=False):
        ident = ["-c", "user.name=auto-optim", "-c", "user.email=auto-optim@localhost"]
    if repo.head.is_valid() and not repo.git.diff("HEAD", "--", *rel):
        return repo.head.commit.hexsha[:10]  # nothing new to commit: HEAD already holds these files
    repo.git.execute(["git", *ident, "commit", "-q", "-m", message, "--", *rel])
    return repo.head.commit.hexsha[:10]


def _best_copy(preset: str, cand: Path) -> Path:
    return C.root() / "runs" / f"best_{preset}_{cand.name}"


def restore(best: dict[str, str] | None, cand: Path, preset: str, repo: Any) -> str:
    """Put the best keeper's source back into the candidate file; say where it came from."""
    if best is None:
        return "no keeper yet; candidate left as is"
    if repo is not None and best["commit"] not in ("-", "nogit"):
        rel = cand.resolve().relative_to(Path(repo.working_tree_dir).resolve()).as_posix()
        C.atomic_write(cand, repo.git.show(f"{best['commit']}:{rel}", strip_newline_in_stdout=False))
        return f"restored from {best['exp']} (commit {best['commit']})"
    saved = _best_copy(preset, cand)
    if saved.is_file():
        C.atomic_write(cand, saved.read_bytes())
        return f"restored from {best['exp']} (saved copy {saved.name})"
    return "no copy of the best keeper found; candidate left as is"


def apply(rec: dict[str, Any], goals: dict[str, Any], cand: Path, rebaseline: bool) -> int:
    """The bookkeeping half: decide against results.tsv, record, restore or commit."""
    rows = R.read_rows()
    preset = rec["preset"]
    rebaseline = rebaseline or bool(rec.get("rebaseline"))
    check_frozen(rows, preset, rec["frozen_hash"], rebaseline)
    exp = R.next_exp_id(rows)
    best = R.best_row(rows, preset)
    v, b = rec.get("verify") or {}, rec.get("bench") or {}
    status = rec["outcome"]
    rerun_note, reproduced = "", False
    if status == "measured":
        if best is None or rebaseline:
            status = "baseline"
        elif is_rerun(rec["candidate_sha"], best):
            status = "rerun"
            change = b["median_s"] / float(best["median_s"]) - 1
            reproduced = abs(change) <= goals["noise_threshold"]
            rerun_note = (f"re-run of {best['exp']} ({float(best['median_s']):.4g} s): {change:+.2%}, "
                          f"{'within' if reproduced else 'OUTSIDE'} the {goals['noise_threshold']:.0%} noise threshold")
        else:
            status = decide(b["median_s"], b["spread_s"], float(best["median_s"]), float(best["spread_s"]),
                            goals["noise_threshold"])
    base_row = R.baseline_row(rows, preset)
    speedup = None
    if b.get("baseline"):
        speedup = b["baseline"]["speedup_vs_fp32"]  # measured in the same process
    elif b.get("median_s") and base_row and status != "baseline":
        speedup = float(base_row["median_s"]) / b["median_s"]  # the baseline row is fp32 eager
    elif b.get("median_s") and status == "baseline":
        speedup = 1.0
    env = b or v
    versions = f"torch {env.get('torch', '?')} cuda {env.get('cuda')} cudnn {env.get('cudnn')}"
    repo = _git_repo()
    note = ""
    commit = "-"
    if status in R.KEEPERS:
        if cand.read_text() != rec["source"]:
            C.atomic_write(cand, rec["source"])
        C.atomic_write(_best_copy(preset, cand), rec["source"])
        if repo is not None:
            psnr = v.get("psnr_db")
            msg = f"{exp}: {b['median_s']:.4g} s, {psnr:.2f} dB: {rec['desc']}" if isinstance(psnr, (int, float)) \
                else f"{exp}: {b['median_s']:.4g} s: {rec['desc']}"
            commit = _commit(repo, [cand], msg)
        else:
            commit = "nogit"
    else:
        note = restore(best, cand, preset, repo)
    row = {"exp": exp, "commit": commit, "timestamp": rec["timestamp"], "desc": rec["desc"],
           "status": status, "median_s": b.get("median_s"), "spread_s": b.get("spread_s"),
           "psnr_db": v.get("psnr_db"), "max_abs": v.get("max_abs"), "speedup_vs_fp32": speedup,
           "gpu": env.get("gpu"), "preset": preset, "weights": env.get("weights_kind"),
           "frozen_hash": rec["frozen_hash"], "candidate_sha": rec["candidate_sha"], "versions": versions}
    R.append_row(row)
    rows = R.read_rows()
    R.write_leaderboard(rows)
    med = f"{b['median_s']:.4g} s" if b.get("median_s") else "-"
    psnr = f"{v['psnr_db']:.2f} dB" if isinstance(v.get("psnr_db"), (int, float)) else "-"
    why = rec.get("reason") or rerun_note
    R.append_progress(f"{exp} {status}: {med}, {psnr}: {rec['desc']}" + (f" ({why})" if why else ""))
    written = [R.results_path(), R.leaderboard_path(), R.progress_path()]
    if status in R.KEEPERS and not rec.get("profile_md"):
        print(f"run_experiment: keeper {exp} has no profile in its record (measured as would-be "
              f"{rec.get('would_be')}); run harness/profile.py --out profiles/{exp}.md", file=sys.stderr)
    if status in R.KEEPERS and rec.get("profile_md"):
        prof = C.root() / "profiles" / f"{exp}.md"
        C.atomic_write(prof, rec["profile_md"].replace("# Profile: pending", f"# Profile: {exp} ({rec['desc']})", 1))
        written.append(prof)
    if status in R.KEEPERS and rec.get("strip_png"):
        strip = C.root() / "quality" / f"{exp}.png"
        C.atomic_write(strip, base64.b64decode(rec["strip_png"]))
        written.append(strip)
    png = render_plot()
    if png:
        written.append(png)
    if status in R.KEEPERS and repo is not None:
        _commit(repo, written, f"{exp}: record and profile")
    facts = {"exp": exp, "status": status, "commit": commit, "median_s": b.get("median_s"),
             "spread_s": b.get("spread_s"), "psnr_db": v.get("psnr_db"), "max_abs": v.get("max_abs"),
             "speedup_vs_fp32": speedup, "best_before": best["exp"] if best else None,
             "reason": rec.get("reason"), "restore": note or None, "rerun": rerun_note or None, "preset": preset}
    human = [f"{exp}: {status.upper()}  median {med}  PSNR {psnr}  ({rec['desc']})"]
    if best and status in ("keep", "revert"):
        human.append(f"  best before: {best['exp']} {float(best['median_s']):.4g} s "
                     f"(needs < {float(best['median_s']) * (1 - goals['noise_threshold']):.4g} s and a gain "
                     f"beyond the spread)")
    for line in (note, rerun_note):
        if line:
            human.append(f"  {line}")
    C.emit(human, facts)
    return 0 if status in R.KEEPERS or reproduced else 1


def render_plot() -> Path | None:
    try:
        from harness import plots  # lazy: helper module with matplotlib inside
        out = plots.render_progress(R.results_path(), C.root() / "progress.png")
        return Path(out) if out else None
    except ImportError as e:
        print(f"run_experiment: progress plot skipped ({e})", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a plot must never lose a record
        print(f"run_experiment: progress plot failed: {type(e).__name__}: {e}", file=sys.stderr)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--desc", help="what this experiment changes (required unless --apply)")
    p.add_argument("--preset")
    p.add_argument("--candidate", type=Path, help="default: goals.json's candidate (optimize.py)")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per verify/bench/profile run")
    p.add_argument("--bench-baseline", action="store_true", help="also time fp32/bf16 eager in the bench run")
    p.add_argument("--no-profile", action="store_true", help="skip profiling a keeper")
    p.add_argument("--rebaseline", action="store_true",
                   help="a person accepts changed frozen files: this run becomes the new baseline")
    p.add_argument("--measure-only", action="store_true", help="verify+bench(+profile), write --record-out")
    p.add_argument("--record-out", type=Path)
    p.add_argument("--best-median", type=float, help="with --measure-only: the best median to beat")
    p.add_argument("--apply", type=Path, metavar="RECORD.json", help="record a --measure-only result here")
    a = p.parse_args(argv)
    try:
        goals = C.load_goals()
        cand = (a.candidate or C.root() / goals["candidate"]).resolve()
        if a.apply:
            try:
                rec = json.loads(a.apply.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise Refused(f"cannot read record {a.apply}: {e}") from None
            return apply(rec, goals, cand, a.rebaseline)
        if not a.desc or not a.desc.strip():
            raise Refused("--desc is required: say what this experiment changes")
        if a.measure_only and not a.record_out:
            raise Refused("--measure-only needs --record-out FILE.json")
        rec = measure(a, goals)
        if a.measure_only:
            C.atomic_write(a.record_out, json.dumps(rec, indent=1, default=str))
            C.emit([f"record written to {a.record_out} ({rec['outcome']}"
                    + (f", would be {rec['would_be']})" if "would_be" in rec else ")"),
                    f"apply it in the git checkout: python harness/run_experiment.py --apply {a.record_out.name}"],
                   {"record": str(a.record_out), "outcome": rec["outcome"], "would_be": rec.get("would_be"),
                    "median_s": rec["bench"].get("median_s"), "psnr_db": rec["verify"].get("psnr_db")})
            return 0
        return apply(rec, goals, cand, a.rebaseline)
    except (Refused, C.SetupError) as e:
        print(f"run_experiment: refused: {e}", file=sys.stderr)
        C.emit([f"REFUSED: {e}"], {"status": "refused", "reason": str(e)})
        return 2


if __name__ == "__main__":
    sys.exit(main())
