"""The ledger: an experiment's record becomes a row, and git and optimize.py follow it.

`apply(rec, goals)` (under the records lock) judges a measured record against results.tsv with the
keep rule (harness/keep_rule.py), writes records/<exp>.json then its row (harness/records.py), the
leaderboard, PROGRESS.md and this machine's progress picture; a keeper's source becomes the
candidate file and is committed with its profile and quality strip; after a revert the candidate
file is restored to the current keeper. A stored record holds what is nowhere else: the profile
and the strip live in profiles/ and quality/, and the record points at them (path and sha256).
`summary` is what a person reads at the end of a run.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from harness import _common, paths
from harness import floor, keep_rule, leaderboard
from harness import records
from harness.record_file import validate_record
from harness.goals import Goals
from harness import git_plumbing, nofollow
from harness.git_plumbing import CommitFailed
from harness.records import Refused
from harness.replies import markdown


def check_committed(repo: Path | None, goals: Goals) -> None:
    """A revert restores the candidate from git and every row names a commit, so the target's files
    (goals file, candidate, adapter package, the code goals.json's "frozen" names) must be
    committed: refused up front, in one line, not a git error after the baseline row."""
    if repo is None:
        return
    top = repo
    here = _common.root()
    files = [_common.goals_path(), here / goals["candidate"], here / goals["adapter"].split(".")[0],
             *(here / p for p in goals.frozen)]
    rel = [os.path.relpath(p, top) for p in files if p.exists() or p.is_symlink()]
    committed = list(git_plumbing.tree_entries(top, git_plumbing.head(top), rel))
    missing = [r for r in rel if not any(c == r or c.startswith(r + "/") for c in committed)]
    missing += git_plumbing.git(top, "ls-files", "--others", "--exclude-standard", "--", *rel).splitlines()
    if missing:
        raise Refused(f"{', '.join(dict.fromkeys(missing))} not committed: a revert restores {goals['candidate']} from "
                      f"git and each row names a commit; commit the target first (git add {os.path.relpath(_common.root(), top)} "
                      f"&& git commit), then run again")


def check_frozen(base: dict[str, str] | None, fh: str) -> None:
    """Refuse a run whose frozen files differ from its baseline's. The goals file is one of them: it
    is checked first (harness/goals.py), so a broken one is named as such, never answered with
    --rebaseline, which would start a new comparison on it."""
    _common.load_goals()  # read once per process: the same check the tools made when they started
    if base and base["frozen_hash"] != fh:
        raise Refused(
            f"the frozen files (harness/, the adapter's package, goals.json and what it names frozen) hash to "
            f"{fh}, but baseline {base['exp']} was recorded with {base['frozen_hash']}: numbers would not be "
            f"comparable. Undo the change to the frozen files, or (a person, on purpose) rerun with --rebaseline "
            f"to start a new baseline.")


def git_repo() -> Path | None:
    """The working tree that holds the target's folder (harness/git_plumbing.py), None
    without git (a GPU machine): its rows say "nogit"."""
    # git_plumbing.top takes only a .git git can read: an empty one (a copy's, Claude Code's placeholder) is none
    return git_plumbing.top(_common.root()) if shutil.which("git") else None


def _commit(repo: Path, files: dict[Path, bytes], message: str) -> str:
    """Commit exactly these bytes (git plumbing, filters off: what was measured or written, whatever
    .gitattributes or .gitignore say); the commit that holds them, 10 digits. CommitFailed else."""
    rel = {os.path.relpath(p, repo): data for p, data in files.items()}
    new = git_plumbing.commit(repo, rel, message)
    # Nothing new to commit: the row names the commit that made these files what they are.
    return (new or git_plumbing.last_commit_of(repo, sorted(rel)) or "-")[:10]


def _head(repo: Path | None) -> str:
    head = git_plumbing.head(repo) if repo is not None else None
    return head[:10] if head else "nogit"


def _target(goals: dict[str, Any]) -> tuple[Path, str]:
    """The candidate file, as the target's folder and its name there (never resolved: a link is refused)."""
    return _common.root(), str(goals["candidate"])


def _read_target(goals: dict[str, Any]) -> str | None:
    """The candidate file's text, read without following a link; None when it is not there."""
    root, rel = _target(goals)
    try:
        return nofollow.read_text(root, rel)
    except FileNotFoundError:
        return None


def _saved_best(preset: str) -> Path:
    return _common.root() / "runs" / f"best_{preset}.py"


def restore(keeper: dict[str, str] | None, goals: dict[str, Any], preset: str, repo: Path | None) -> str:
    """Put the current keeper's source (records.current_row; saved at its keep) back into optimize.py;
    say where it came from. The file is read and replaced without following a link."""
    saved = _saved_best(preset)
    root, name = _target(goals)
    if keeper is not None and keeper["status"] == "keep" and saved.is_file():
        source, where = saved.read_text(), f"{keeper['exp']}, the current keeper"
    elif repo is not None and keeper is not None and keeper["commit"] not in ("-", "nogit"):
        rel = os.path.relpath(root / name, repo)
        blob = git_plumbing.show(repo, keeper["commit"], rel)
        if blob is None:
            return f"{name} left as it is: {rel} is not in {keeper['exp']}'s commit {keeper['commit']}"
        source, where = blob.decode(), f"the version committed with {keeper['exp']} ({keeper['commit']})"
    else:
        return f"{name} left as it is (no keeper to restore yet)"
    try:
        if _read_target(goals) == source:
            return f"{name} is already {where}"
        nofollow.write_bytes(root, name, source)
    except nofollow.NotPlain as e:
        return f"{name} left as it is: {e}"
    return f"{name} restored to {where}"


def apply(rec: dict[str, Any], goals: dict[str, Any], rebaseline: bool = False) -> tuple[int, dict[str, Any]]:
    """Decide against results.tsv, record, restore or commit. Returns (exit code, facts).
    Under the records lock: a wave or a second --apply never interleaves its rows and commits."""
    with records.records_lock():
        return _apply(rec, goals, rebaseline)


def _apply(rec: dict[str, Any], goals: dict[str, Any], rebaseline: bool) -> tuple[int, dict[str, Any]]:
    validate_record(rec, goals)
    target = _common.root() / goals["candidate"]
    # Whether the target itself was measured (then a revert restores it): compared, never opened.
    measured_target = rec.get("candidate_file") in (None, str(target))
    try:  # read without following a link (a link refused here: nothing recorded)
        on_disk = _read_target(goals) if measured_target or rec["outcome"] == "measured" else None
    except nofollow.NotPlain as e:
        raise Refused(f"{e}; nothing recorded") from None
    rows = records.read_rows()
    records.check_complete()
    preset = rec["preset"]
    f = rec.get("facts") or {}
    gpu = f.get("gpu") or "?"
    is_baseline = rebaseline or bool(rec.get("rebaseline"))
    base = records.baseline_row(rows, preset, gpu)
    if not is_baseline:
        if base is None:
            raise Refused(f"no baseline row for preset {preset} on {gpu}: apply that machine's baseline record first")
        check_frozen(base, rec["frozen_hash"])
    if measured_target and "source" in rec and on_disk is not None and on_disk != rec["source"] \
            and rec.get("outcome") != "tampered":
        raise Refused(f"{target.name} changed while it was being measured (the record holds other source). "
                      f"Nothing recorded; run it again and leave the file alone until it finishes.")
    better = goals.better
    exp = records.next_exp_id(rows)
    best = None if is_baseline else records.best_row(rows, preset, gpu, better)
    current = None if is_baseline else records.current_row(rows, preset, gpu)
    status = rec["outcome"]
    verdict, reproduced = "", False
    if status == "measured":
        if is_baseline:
            status = "baseline"
        else:
            v = keep_rule.judge_record(rec, goals, best, current, _common.root() / "records",
                                       records.keepers(rows, preset, gpu))
            status, verdict, reproduced = v.status, v.reason, v.reproduced
    base_row = base if not is_baseline else None
    speedup = None
    if status == "baseline":
        speedup = 1.0
    elif f.get("median_s") and base_row:
        speedup = records.Row.of(base_row).median_s / f["median_s"]  # the baseline row is fp32 eager
    record, prof, strip = (_common.root() / d / f"{exp}.{ext}" for d, ext in (("records", "json"), ("profiles", "md"), ("quality", "png")))
    taken = [x for x in (record, prof, strip) if x.exists()]
    if taken:
        raise Refused(f"{taken[0].relative_to(_common.root())} exists but results.tsv has no row {exp}: nothing is ever "
                      f"written over a record; run python harness/records.py restore")
    repo = git_repo()
    note, commit, unsaved = "", "-", []
    if status == "keep":
        _common.atomic_write(_saved_best(preset), rec["source"])
        if on_disk != rec["source"]:
            try:
                nofollow.write_bytes(*_target(goals), rec["source"])
            except nofollow.NotPlain as e:  # swapped for a link since it was read: the commit holds the source
                unsaved.append(f"{goals['candidate']} was not written: {e}")
        if repo is None:
            commit = "nogit"
        else:  # the measured bytes themselves, whatever the file holds by now
            try:
                commit = _commit(repo, {target: rec["source"].encode()}, _commit_msg(exp, f, goals, rec["desc"]))
            except CommitFailed as e:
                unsaved.append(f"the keeper commit failed: {e}")
    elif status == "baseline":
        commit = _head(repo)  # the frozen baseline file, as committed
        _saved_best(preset).unlink(missing_ok=True)
    elif measured_target:
        note = restore(current, goals, preset, repo)
        if " restored to " in note:  # the edit it replaced is in the record
            note += (f"; the candidate's source is kept in records/{exp}.json (\"source\"): python harness/records.py "
                     f"source {exp} > {_target(goals)[1]} brings it back")
    # A keeper's profile and quality strip go to profiles/ and quality/; its record points at them.
    files = {}
    if status in records.KEEPERS and rec.get("profile_md"):
        files["profile_md"] = (prof, rec["profile_md"].replace("# Profile: pending", f"# Profile: {exp} ({rec['desc']})", 1).encode())
    if status in records.KEEPERS and rec.get("strip_png"):
        files["strip_png"] = (strip, base64.b64decode(rec["strip_png"]))
    pointers = {f"{key.rsplit('_', 1)[0]}_file": {"path": path.relative_to(_common.root()).as_posix(), "sha256": _common.sha256_bytes(data)}
                for key, (path, data) in files.items()}
    # The record first, then the row made from it (records.row_from_record): a row is never without its record.
    # No picture is stored inside a record: a keeper's strip is the file beside it, a revert keeps none.
    entry = {**{k: v for k, v in rec.items() if k not in files and k != "strip_png"}, **pointers,
             "exp": exp, "status": status, "commit": commit, "speedup_vs_fp32": speedup, "verdict": verdict or None}
    _common.atomic_write(record, json.dumps(entry, indent=1, default=str), exclusive=True)
    row = records.row_from_record(json.loads(record.read_text()))
    records.append_row(row)
    rows = records.read_rows()
    leaderboard.write_leaderboard(rows, goals=goals, here=(preset, gpu))
    why = rec.get("reason") or verdict
    try:
        leaderboard.append_progress(f"{exp} {status}: {_fmt_metric(rec, goals)}: {rec['desc']}" + (f" ({markdown(why)})" if why else ""))
    except nofollow.NotPlain as e:  # the row and its record are written: the journal line alone is left out
        print(f"run_experiment: no log line for {exp} in PROGRESS.md: {e}", file=sys.stderr)
    written = [records.results_path(), records.leaderboard_path(), records.progress_path(),
               *sorted((_common.root() / "records").glob("*.json"))]
    if status == "keep" and not rec.get("profile_md") and not rec.get("no_profile"):
        print(f"run_experiment: keeper {exp} has no profile in its record; "
              f"run python harness/profile.py --out profiles/{exp}.md", file=sys.stderr)
    for path, data in files.values():
        _common.atomic_write(path, data, exclusive=True)
        written.append(path)
    if status in records.KEEPERS:  # drawn where it is committed: python harness/plots.py draws it any time
        png = render_plot(goals, preset, gpu)
        if png:
            written.append(png)
        if repo is not None:
            try:
                _commit(repo, _contents(written), f"{exp}: record and profile")
            except CommitFailed as e:
                unsaved.append(f"the record commit failed: {e}")
    if unsaved:  # loudly, and exit 1; what is recorded stays on disk
        unsaved = [f"{exp} is recorded (its row, records/{exp}.json) but {'; '.join(unsaved)}. "
                   "Commit what is missing by hand (git add, git commit)"]
        print(f"run_experiment: NOT COMMITTED: {unsaved[0]}", file=sys.stderr)
    return (1 if status in records.RED or unsaved else 0), {"unsaved": unsaved[0] if unsaved else None,
        "exp": exp, "status": status, "row": row, "best": best, "against": current, "note": note, "verdict": verdict, "reason": rec.get("reason"),
        "range_s": (f["min_s"], f["max_s"]) if f.get("min_s") is not None and f.get("max_s") is not None else None,
        "calls_checked": len(f.get("checked") or [])}


def _contents(paths: list[Path]) -> dict[Path, bytes]:
    """The files of a record commit as they are now (PROGRESS.md, the agent's, read without following
    a link and left out when it is one)."""
    out = {}
    for path in paths:
        try:
            out[path] = (nofollow.read_bytes(path.parent, path.name, nofollow.JOURNAL_CAP)
                         if path == records.progress_path() else path.read_bytes())
        except (FileNotFoundError, nofollow.NotPlain):
            continue
    return out


def _commit_msg(exp: str, f: dict[str, Any], goals: dict[str, Any], desc: str) -> str:
    q = f.get("quality")
    name = goals.quality_name
    return f"{exp}: {f['median_s']:.4g} s" + (f", {name} {q:.4g}" if isinstance(q, (int, float)) else "") + f": {desc}"


def _fmt_metric(rec: dict[str, Any], goals: dict[str, Any]) -> str:
    if rec.get("metric") is None:
        return "-"
    spec = goals.metric_spec
    return f"{rec['metric']:.4g} {spec.get('unit', '')}".strip()


def render_plot(goals: dict[str, Any], preset: str, gpu: str) -> Path | None:
    """This machine's picture (progress/<preset>-<machine>.png): never another machine's."""
    try:
        from harness import plots  # lazy: helper module with matplotlib inside
        out = plots.render_progress(records.results_path(), plots.progress_path(_common.root(), preset, gpu), goals, preset, gpu)
        return Path(out) if out else None
    except ImportError as e:
        print(f"run_experiment: progress plot skipped ({e})", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a plot must never lose a record
        print(f"run_experiment: progress plot failed: {type(e).__name__}: {e}", file=sys.stderr)
    return None


def seconds(s: float) -> str:
    """A duration in plain digits: a spread below a millisecond in ms, never as 9.4e-05 s."""
    return f"{s:.4g} s" if s >= 1e-3 else f"{s * 1e3:.2g} ms"


def timing_line(r: dict[str, Any], goals: dict[str, Any], base: dict[str, Any] | None) -> str:
    """The median, the range and spread of the timed calls it came from, and the quality (the worst
    of the checked outputs); for a keeper, the ratio to the baseline in force. Whether it is a gain
    is the verdict's to say (harness/keep_rule.py), and nothing here says otherwise."""
    row, spec = r["row"], goals.metric_spec
    line = f"  {row['median_s']:.4g} s per call (median of the timed calls)"
    if goals.better == "higher" and row.get("metric") is not None:
        line += f" = {row['metric']:.4g} {spec.get('unit', '')}"
    if r.get("range_s"):
        lo, hi = r["range_s"]
        line += f"; the calls ranged {lo:.4g}-{hi:.4g} s (spread {seconds(hi - lo)}, {(hi - lo) / row['median_s']:.0%} of the median)"
    if row.get("quality") is not None:
        checked = r.get("calls_checked")
        line += (f"; {goals.quality_name} {row['quality']:.4g} against the reference"
                 + (f" (the worst of {checked} checked outputs)" if checked else ""))
    if row.get("speedup_vs_fp32") is not None and r["status"] == "keep" and base is not None:
        line += f"\n  {row['speedup_vs_fp32']:.2f}x the fp32 eager baseline's median on this machine ({base['exp']})"
    return line


MEANING = {
    "baseline": "the frozen model in fp32 eager (PyTorch defaults): the yardstick every speedup is over",
    "keep": "faster than the keeper timed beside it, beyond the noise: now the candidate file, committed",
    "revert": "no gain beyond the noise over the keeper beside it: the candidate file was put back",
    "inconclusive": "too noisy to tell: not kept, the candidate file put back; run it again on a quieter machine",
    "rerun": "a keeper's own code measured again",
    "gate_fail": "an output failed the gate (quality) or the checks",
    "crash": "the candidate raised, or its worker died",
    "timeout": "the build or a call took longer than allowed",
    "tampered": "a frozen file changed during the run: void",
}
SHOWN_ROWS = 12  # the last rows of this machine's comparison that a run's summary prints


def your_rows(rows: list[dict[str, Any]], goals: dict[str, Any], preset: str, gpu: str) -> list[str]:
    """This machine's rows since its baseline (the comparison in force), and what their statuses
    mean: what a first run's output ends with."""
    base = records.baseline_row(rows, preset, gpu)
    if base is None:
        return []
    mine = [r for r in rows[rows.index(base):] if r["preset"] == preset and r["gpu"] == gpu]
    unit = goals.metric_spec.get("unit", "")
    lines = [f"This machine's rows (preset {preset}, {gpu}) since the baseline {base['exp']}; results.tsv holds them "
             f"all, leaderboard.md ranks the keepers:"]
    if len(mine) > SHOWN_ROWS:
        lines.append(f"  ... {len(mine) - SHOWN_ROWS} earlier rows")
    for r in mine[-SHOWN_ROWS:]:
        row = records.Row.of(r)
        metric = f"{row.metric_value:.4g} {unit}".strip() if r["status"] not in records.RED else "-"
        speed = f"{row.speedup_vs_fp32:.2f}x" if row.speedup_vs_fp32 is not None and r["status"] not in records.RED else "-"
        lines.append(f"  {r['exp']}  {r['status']:<12}  {metric:>12}  {speed:>6}  {r['desc']}")
    lines.append("  (the x: the fp32 eager baseline's median over the row's, each timed at its own moment)")
    for status in dict.fromkeys(r["status"] for r in mine[-SHOWN_ROWS:]):
        lines.append(f"  {status}: {MEANING.get(status, '')}")
    return lines


def _run_command() -> str:
    """The command that runs this target again: no option for the default target, --target NAME for
    another of targets/, AUTO_OPTIM_GOALS=... for a goals file outside them."""
    run = "python harness/run_experiment.py "
    where = _common.goals_path()
    folder = where.parent
    if where.name == "goals.json" and folder.parent == (_common.REPO / paths.TARGETS).resolve():
        try:
            default = paths.default_target()
        except paths.TargetError:
            default = None
        return run + ("" if folder.name == default else f"--target {folder.name} ") + '--desc "..."'
    return f"AUTO_OPTIM_GOALS={os.path.relpath(where, Path.cwd())} " + run + '--desc "..."'


def next_step(result: dict[str, Any], goals: dict[str, Any]) -> str:
    """What to do after this run, for this target, on this device, after this outcome."""
    row, status, exp = result["row"], result["status"], result["exp"]
    cand = goals["candidate"]
    command = _run_command()
    if status in records.RED:
        return (f"Next: fix what 'why' says above in {cand} and run again ({command}); the candidate's source stays "
                f"in records/{exp}.json (python harness/records.py source {exp} prints it).")
    if status == "inconclusive":
        back = f" (python harness/records.py source {exp} > {cand} brings it back first)" \
            if " restored to " in (result.get("note") or "") else ""
        return (f"Next: nothing was kept. Run the candidate again{back} when the machine is quieter (other jobs "
                f"stopped: `uptime` shows the load)" + (", or on a GPU machine." if _common.on_cpu(row["gpu"]) else "."))
    if str(goals.get("description", "")).startswith("REPLACE"):  # harness/new_target.py's stand-in, as written
        return (f"Next: this target is still new_target.py's stand-in: replace its model, input and gate (README.md in "
                f"{_common.root().name}/), commit, then run {command}.")
    if _common.on_cpu(row["gpu"]):
        return (f"On a CPU the {row['preset']} preset checks the loop end to end; a CPU's speed says little about a GPU's. "
                f"Next: the same command on a GPU machine ({command}; README, 'On a GPU'), or let Claude Code run "
                f"the loop (README, 'Running it with Claude Code').")
    return (f"Next: read the keeper's profile (profiles/), change {cand}, run this again (program.md has the loop); "
            f"leaderboard.md ranks this machine's keepers.")


def summary(results: list[dict[str, Any]], goals: dict[str, Any]) -> list[str]:
    """The last lines of a run: what each row says, in plain words, what to do next, and this
    machine's rows with what they mean."""
    lines = []
    rows = records.read_rows()
    for r in results:
        row = r["row"]
        what = f"{r['exp']}: {r['status'].upper()}  {row['desc']}"
        if row.get("median_s") is not None:
            upto = rows[:next(i for i, x in enumerate(rows) if x["exp"] == r["exp"]) + 1]
            what += "\n" + timing_line(r, goals, records.baseline_row(upto, row["preset"], row["gpu"]))
        if r.get("reason"):
            what += f"\n  why: {r['reason']}"
        if r.get("verdict"):
            what += f"\n  {r['verdict']}"
        if r.get("note"):
            what += f"\n  {r['note']}"
        lines.append(what)
    last = results[-1]
    row = last["row"]
    if not _common.on_cpu(row["gpu"]):  # the stop rule's floor and profile figures mean nothing on a CPU
        stop, why, best = floor.verdict_for_rows(rows, goals, row["preset"], row["gpu"], floor.load_peak(row["gpu"]),
                                                 _common.load_adapter(goals), _common.root() / "records")
        lines.append(f"Stop rule (program.md section 7) on {best}: " + ("STOP, every condition holds." if stop
                     else "not yet:\n" + "\n".join(f"  - {w}" for w in why)))
    lines.append(next_step(last, goals))
    return lines + your_rows(rows, goals, row["preset"], row["gpu"])
