"""Applying a measured record: the keep rule's verdict, the Record written once to the store, the views written from it, the candidate file and git following it.

`apply(rec, goals)` (under the records lock) judges a measured record against the rows with the
keep rule (harness/decide/keep_rule.py), writes the Record (store.py) then results.tsv and leaderboard.md
from records/ (results.py, leaderboard.py), PROGRESS.md's line and this machine's progress picture;
a keeper's source becomes the candidate file and is committed with its profile and quality strip;
after a revert the candidate file is restored to the current keeper. A stored record holds what is
nowhere else: the profile and the strip live in profiles/ and quality/, the source in
records/sources/, and the record points at them (path or hash).
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from harness import hashing, nofollow, _common
from harness.decide import keep_rule
from harness.goals import Goals
from harness.ledger import git_plumbing, leaderboard, results, rows as R, signing
from harness.errors import Refused
from harness.ledger.git_plumbing import CommitFailed
from harness.ledger.record import FIELDS, Record, check_measured
from harness.ledger.rows import KEEPERS, RED, Row
from harness.ledger.store import Store, records_lock
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
    """The working tree that holds the target's folder (harness/ledger/git_plumbing.py), None
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
    """Put the current keeper's source (rows.current_row; saved at its keep) back into optimize.py;
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
        source, where = blob.decode(), f"{keeper['exp']}'s code (commit {keeper['commit']})"
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
    with records_lock():
        return _apply(rec, goals, rebaseline)


def _apply(rec: dict[str, Any], goals: dict[str, Any], rebaseline: bool) -> tuple[int, dict[str, Any]]:
    check_measured(rec, goals)
    target = _common.root() / goals["candidate"]
    # Whether the target itself was measured (then a revert restores it): compared, never opened.
    measured_target = rec.get("candidate_file") in (None, str(target))
    try:  # read without following a link (a link refused here: nothing recorded)
        on_disk = _read_target(goals) if measured_target or rec["outcome"] == "measured" else None
    except nofollow.NotPlain as e:
        raise Refused(f"{e}; nothing recorded") from None
    store = Store.here()
    results.check_complete(store)
    try:  # the key that will sign the record: unusable (hidden by a sandbox), nothing is changed yet
        signing.sign({})
    except OSError as e:
        raise Refused(f"the record-signing key {signing.key_path()} cannot be used ({e}); nothing recorded") from None
    rows = results.rows(store)
    preset = rec["preset"]
    f = rec.get("facts") or {}
    gpu = f.get("gpu") or "?"
    is_baseline = rebaseline or bool(rec.get("rebaseline"))
    base = R.baseline_row(rows, preset, gpu)
    if not is_baseline:
        if base is None:
            raise Refused(f"no baseline row for preset {preset} on {gpu}: apply that machine's baseline record first")
        check_frozen(base, rec["frozen_hash"])
    if measured_target and "source" in rec and on_disk is not None and on_disk != rec["source"] \
            and rec.get("outcome") != "tampered":
        raise Refused(f"{target.name} changed while it was being measured (the record holds other source). "
                      f"Nothing recorded; run it again and leave the file alone until it finishes.")
    better = goals.better
    exp = R.next_exp_id(rows)
    best = None if is_baseline else R.best_row(rows, preset, gpu, better)
    current = None if is_baseline else R.current_row(rows, preset, gpu)
    status = rec["outcome"]
    verdict = ""
    if status == "measured":
        if is_baseline:
            status = "baseline"
        else:
            v = keep_rule.judge_record(rec, goals, best, current, store.folder,
                                       R.keepers(rows, preset, gpu))
            status, verdict = v.status, v.reason
    base_row = base if not is_baseline else None
    speedup = None
    if status == "baseline":
        speedup = 1.0
    elif f.get("median_s") and base_row:
        speedup = Row.of(base_row).median_s / f["median_s"]  # the baseline row is fp32 eager
    record, prof, strip = (store.path(exp), *(_common.root() / d / f"{exp}.{ext}" for d, ext in (("profiles", "md"), ("quality", "png"))))
    taken = [x for x in (record, prof, strip) if x.exists()]
    if taken:
        raise Refused(f"{taken[0].relative_to(_common.root())} exists but results.tsv has no row {exp}: nothing is ever "
                      f"written over a record; run auto-optim records restore")
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
            note += (f"; the candidate's source is kept in records/ (its record names it): auto-optim records "
                     f"source {exp} > {_target(goals)[1]} brings it back")
    # A keeper's profile and quality strip go to profiles/ and quality/; its record points at them.
    files = {}
    if status in KEEPERS and rec.get("profile_md"):
        files["profile_md"] = (prof, rec["profile_md"].replace("# Profile: pending", f"# Profile: {exp} ({rec['desc']})", 1).encode())
    if status in KEEPERS and rec.get("strip_png"):
        files["strip_png"] = (strip, base64.b64decode(rec["strip_png"]))
    pointers = {f"{key.rsplit('_', 1)[0]}_file": {"path": path.relative_to(_common.root()).as_posix(), "sha256": hashing.sha256_bytes(data)}
                for key, (path, data) in files.items()}
    # The record first, then the views made from records/: a row is never without its record.
    # No picture is stored inside a record: a keeper's strip is the file beside it, a revert keeps none;
    # the source is stored once by its hash (records/sources/).
    entry = Record(**{k: v for k, v in rec.items() if k in FIELDS and k not in files}, **pointers,
                   exp=exp, status=status, commit=commit, speedup_vs_fp32=speedup, verdict=verdict or None)
    store.write(entry, source=rec.get("source"))
    row = entry.values()
    rows = results.write(store)
    leaderboard.write_leaderboard(rows, goals=goals, here=(preset, gpu))
    why = rec.get("reason") or verdict
    try:
        leaderboard.append_progress(f"{exp} {status}: {_fmt_metric(rec, goals)}: {rec['desc']}" + (f" ({markdown(why)})" if why else ""))
    except nofollow.NotPlain as e:  # the row and its record are written: the journal line alone is left out
        print(f"run_experiment: no log line for {exp} in PROGRESS.md: {e}", file=sys.stderr)
    written = [results.results_path(), leaderboard.leaderboard_path(), leaderboard.progress_path(), *store.files()]
    if status == "keep" and not rec.get("profile_md") and not rec.get("no_profile"):
        print(f"run_experiment: keeper {exp} has no profile in its record; "
              f"run auto-optim profile --out profiles/{exp}.md", file=sys.stderr)
    for path, data in files.values():
        _common.atomic_write(path, data, exclusive=True)
        written.append(path)
    if status in KEEPERS:  # drawn where it is committed: python -m harness.ledger.plots draws it any time
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
    return (1 if status in RED or unsaved else 0), {"unsaved": unsaved[0] if unsaved else None,
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
                         if path == leaderboard.progress_path() else path.read_bytes())
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
        from harness.ledger import plots  # lazy: helper module with matplotlib inside
        out = plots.render_progress(results.results_path(), plots.progress_path(_common.root(), preset, gpu), goals, preset, gpu)
        return Path(out) if out else None
    except ImportError as e:
        print(f"run_experiment: progress plot skipped ({e})", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a plot must never lose a record
        print(f"run_experiment: progress plot failed: {type(e).__name__}: {e}", file=sys.stderr)
    return None
