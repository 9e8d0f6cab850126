"""The record files: results.tsv (append-only), leaderboard.md (generated), PROGRESS.md (journal).

Usage:
    python harness/records.py leaderboard      # regenerate leaderboard.md from results.tsv
    python harness/records.py show             # print the rows of results.tsv
    python harness/records.py restore          # put back rows that git's last commit or records/ hold
    python harness/records.py source EXP       # print the candidate source an experiment measured
                                               # (... > optimize.py brings back a reverted edit)

Importable: read_rows, append_row, row_from_record, check_complete, restore, next_exp_id,
baseline_row, best_row, records_lock, lock_file (leaderboard.md and PROGRESS.md: harness/leaderboard.py). Every write
replaces the whole file atomically (temp file + rename); an append that would change an existing row
is refused. Writers that may run at the same time (a wave's members, an --apply beside it) hold
records_lock() from reading the rows to the last write, so no row is lost and no exp id is given twice.

Nothing recorded is lost: every row is also in its record (records/<exp>.json, written before the
row), so check_complete refuses a results.tsv that holds fewer rows than records/ or git's last
commit, and a records/ that lacks a row's record or one git's last commit holds; restore rebuilds
both from those (it only ever adds).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

sys.path.append(str(Path(__file__).resolve().parent.parent))  # see harness/__init__.py
from harness import paths, _common  # noqa: E402
from harness import git_plumbing  # noqa: E402
from harness.row import Row  # noqa: E402,F401 - read_rows' type, named here for its callers

SetupError = _common.SetupError


class Refused(Exception):
    """Nothing is recorded: frozen files changed, broken setup, bad arguments, a run in progress."""

COLUMNS = ["exp", "commit", "timestamp", "desc", "status", "median_s", "spread_s", "quality",
           "max_abs", "speedup_vs_fp32", "gpu", "preset", "weights", "frozen_hash", "candidate_sha",
           "versions", "wall_s", "sandbox", "metric"]
# Rows written before the worker harness: 16 cells, `psnr_db` where `quality` is now. They are read
# as they are (the missing cells read "-"); the first append rewrites only the header line.
LEGACY_COLUMNS = COLUMNS[:7] + ["psnr_db"] + COLUMNS[8:16]
STATUSES = ("baseline", "keep", "revert", "inconclusive", "rerun", "gate_fail", "crash", "timeout", "tampered")
KEEPERS = ("baseline", "keep")
RED = ("gate_fail", "crash", "timeout", "tampered")
HEADER = "\t".join(COLUMNS) + "\n"
RESTORE = "python harness/records.py restore"
REPAIR = (f"{RESTORE} rebuilds it from git's last commit and records/ (it drops no row; git diff results.tsv "
          "shows what changed), or repair it by hand: every line needs {n} tab-separated cells")


def results_path() -> Path:
    return _common.root() / "results.tsv"


def leaderboard_path() -> Path:
    return _common.root() / "leaderboard.md"


def progress_path() -> Path:
    return _common.root() / "PROGRESS.md"


def read_rows(path: Path | None = None) -> list[dict[str, str]]:
    path = path or results_path()
    if not path.is_file():
        return []
    return [row for _, row in _parse(path.read_text(), path)]


def _parse(text: str, path: Path) -> list[tuple[str, dict[str, str]]]:
    """(line, row) for every row of a results.tsv text; a damaged one raises SetupError naming the line.
    Legacy rows (16 cells) are only read before the first full one: after it a short line is a cut one."""
    repair = REPAIR.format(n=len(COLUMNS))
    if text and not text.endswith("\n"):
        raise SetupError(f"{path} line {text.count(chr(10)) + 1} is cut off (no newline at its end: a "
                         f"half-written line?); " + repair)
    lines = text.splitlines()
    header = lines[0].split("\t") if lines else []
    if header not in (COLUMNS, LEGACY_COLUMNS):
        raise SetupError(f"{path} does not start with the expected header ({len(COLUMNS)} columns); " + repair)
    out, full = [], False
    for n, line in enumerate(lines[1:], 2):
        cells = line.split("\t")
        full = full or len(cells) == len(COLUMNS)
        if len(cells) != len(COLUMNS) and (full or len(cells) != len(LEGACY_COLUMNS)):
            raise SetupError(f"{path} line {n} has {len(cells)} cells, expected {len(COLUMNS)} "
                             f"(a cut-off or hand-edited line?); " + repair)
        out.append((line + "\n", Row(zip(COLUMNS, cells + ["-"] * (len(COLUMNS) - len(cells))))))
    return out


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    # Tabs and newlines would break the table; desc comes from a person.
    return re.sub(r"[\t\r\n]+", " ", str(v)).strip() or "-"


def append_row(row: dict[str, Any], path: Path | None = None) -> str:
    """Append one row; the old rows are kept byte for byte or nothing is written."""
    path = path or results_path()
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)}")
    if row.get("status") not in STATUSES:
        raise ValueError(f"status {row.get('status')!r} not in {STATUSES}")
    old = path.read_text() if path.is_file() else HEADER
    read_rows(path)  # refuses a damaged file before we add to it
    head, _, body = old.partition("\n")
    new = HEADER + body  # a legacy header becomes the current one; the rows stay as they are
    if body and not new.endswith("\n"):
        new += "\n"
    line = row_line(row)
    now = path.read_text() if path.is_file() else HEADER
    if now != old:
        raise SetupError(f"{path} changed while being appended to; nothing written")
    _common.atomic_write(path, new + line)
    return line


def row_line(row: dict[str, Any]) -> str:
    return "\t".join(_cell(row.get(c)) for c in COLUMNS) + "\n"


def row_from_record(rec: dict[str, Any]) -> dict[str, Any]:
    """The results.tsv row of an experiment's record (records/<exp>.json, as run_experiment's apply
    writes it): the one place a row is made, so restore puts back exactly the row that was written.
    A record restore wrote for a row whose record was lost holds that row's cells as they were."""
    if isinstance(rec.get("row"), dict) and rec.get("lost"):
        return {c: rec["row"].get(c) for c in COLUMNS}
    f = rec.get("facts") or {}
    return {"exp": rec["exp"], "commit": rec.get("commit"), "timestamp": rec.get("timestamp"), "desc": rec.get("desc"),
            "status": rec["status"], "median_s": f.get("median_s"), "spread_s": f.get("spread_s"),
            "quality": f.get("quality"), "max_abs": f.get("max_abs"), "speedup_vs_fp32": rec.get("speedup_vs_fp32"),
            "gpu": f.get("gpu") or "?", "preset": rec.get("preset"), "weights": f.get("weights_kind"),
            "frozen_hash": rec.get("frozen_hash"), "candidate_sha": rec.get("candidate_sha"),
            "versions": " ".join(f"{k} {f[k]}" for k in ("torch", "cuda", "cudnn") if f.get(k)),
            "wall_s": rec.get("wall_s"), "sandbox": f.get("sandbox"),
            "metric": rec.get("metric") if rec["status"] not in RED else None}


def exp_number(exp: str) -> int:
    return int(exp[1:]) if re.fullmatch(r"e\d+", exp) else -1


def record_files(path: Path | None = None) -> dict[str, Path]:
    """The experiments' records next to a results.tsv: records/<exp>.json by exp."""
    folder = (path or results_path()).parent / "records"
    files = folder.glob("e*.json") if folder.is_dir() else []
    return {f.stem: f for f in files if exp_number(f.stem) >= 0}


def committed_text(path: Path | None = None) -> str | None:
    """results.tsv as git's last commit holds it; None without git, a commit or a tracked file."""
    path = path or results_path()
    work = git_plumbing.top(path.parent)
    blob = git_plumbing.show(work, "HEAD", os.path.relpath(path, work)) if work is not None else None
    return blob.decode(errors="replace") if blob is not None else None


def _body(text: str | None) -> list[str]:
    return (text or "").splitlines(True)[1:]


def committed_records(path: Path | None = None) -> set[str]:
    """The records (exp names) git's last commit holds next to a results.tsv; empty without git."""
    folder = (path or results_path()).parent
    work = git_plumbing.top(folder)
    if work is None:
        return set()
    try:
        listed = git_plumbing.git(work, "ls-tree", "--name-only", "HEAD", "--", os.path.relpath(folder / "records", work) + "/")
    except git_plumbing.GitError:
        return set()
    names = [Path(n).name for n in listed.splitlines()]
    return {n[:-5] for n in names if n.endswith(".json") and exp_number(n[:-5]) >= 0}


def missing_records(path: Path | None = None) -> list[str]:
    """The experiments whose record records/ lacks: a row of results.tsv has it, or git's last commit."""
    path = path or results_path()
    want = {r["exp"] for r in read_rows(path) if exp_number(r["exp"]) >= 0} | committed_records(path)
    return sorted(want - set(record_files(path)), key=exp_number)


def check_complete(path: Path | None = None) -> None:
    """Refuse (SetupError, one line) a results.tsv that holds fewer rows than records/ or git's last
    commit (a run would number its rows from the gap and write over what was recorded), and a
    records/ that lacks the record of a row or one git's last commit holds."""
    _check_rows(path)
    lost = missing_records(path)
    if lost:
        span = lost[0] + (f"..{lost[-1]}" if len(lost) > 1 else "")
        raise SetupError(f"records/ lacks {_common.plural(len(lost), 'record')} ({span}) that results.tsv or git's last "
                         f"commit holds; nothing recorded. Restore them with `{RESTORE}` (it takes them from git's last "
                         f"commit, as git checkout HEAD -- records/ would, and says which no commit holds), then run again")


def _check_rows(path: Path | None = None) -> None:
    path = path or results_path()
    rows = read_rows(path)
    have = {r["exp"] for r in rows}
    lost = sorted(set(record_files(path)) - have, key=exp_number)
    committed = _body(committed_text(path))
    changed = bool(committed) and _body(path.read_text() if path.is_file() else "")[:len(committed)] != committed
    if not lost and not changed:
        return
    state = f"holds {_common.plural(len(rows), 'row')}" if path.is_file() else "is missing"
    why = ([f"records/ holds {_common.plural(len(lost), 'row')} it lacks ({lost[0]}" + (f"..{lost[-1]}" if len(lost) > 1 else "")
            + ")"] if lost else []) + ([f"git's last commit holds {_common.plural(len(committed), 'row')} it does not start "
                                        "with"] if changed else [])
    raise SetupError(f"{path.name} {state}, but " + " and ".join(why) + f"; nothing recorded. Restore it with "
                     f"`{RESTORE}` (it adds back every row, dropping none), then run again")


def restore(path: Path | None = None) -> list[str]:
    """Rebuild results.tsv from every row of the file, of git's last commit and of records/; the
    rows it added. Never drops a row: a damaged line that no other source holds, or two sources
    that disagree on a row, refuse (SetupError) and nothing is written."""
    path = path or results_path()
    lines: dict[str, str] = {}
    damaged: list[str] = []

    def take(exp: str, line: str, where: str) -> None:
        if lines.setdefault(exp, line) != line:
            raise SetupError(f"row {exp} in {where} differs from the one in results.tsv or git's last commit; "
                             f"compare them (git diff {path.name}) and repair by hand")

    current = path.read_text() if path.is_file() else ""
    for where, text in (("git's last commit", committed_text(path)), (path.name, current)):
        for n, line in enumerate(_body(text), 2):
            cells = line.rstrip("\n").split("\t")
            if line.endswith("\n") and len(cells) in (len(COLUMNS), len(LEGACY_COLUMNS)) and exp_number(cells[0]) >= 0:
                take(cells[0], line, where)
            else:
                damaged.append(f"{path.name} line {n} ({cells[0] or 'empty'})")
    for exp, f in record_files(path).items():
        if exp not in lines:
            try:
                rec = json.loads(f.read_text())
                take(exp, row_line(row_from_record({**rec, "exp": exp})), f"records/{f.name}")
            except (OSError, ValueError, KeyError) as e:
                raise SetupError(f"records/{f.name} cannot be read ({type(e).__name__}); repair it by hand") from None
    unrecovered = [d for d in damaged if d.split("(")[-1].rstrip(")") not in lines]
    if unrecovered:
        raise SetupError(f"{unrecovered[0]} is damaged and no commit or record holds that row: repair it by hand")
    text = HEADER + "".join(lines[e] for e in sorted(lines, key=exp_number))
    _parse(text, path)  # what is written reads back
    if text != current:
        _common.atomic_write(path, text)
    had = {r["exp"] for _, r in _parse(current, path)} if not damaged and current else set()
    return sorted(set(lines) - had, key=exp_number)


def recorded_source(exp: str | None) -> str:
    """The candidate source an experiment measured, as its record holds it (records/<exp>.json
    "source"): what a revert, an inconclusive run or a failure put aside."""
    if not exp or exp_number(exp) < 0:
        raise SetupError(f"name the experiment whose source to print (e005), not {exp!r}")
    path = results_path().parent / "records" / f"{exp}.json"
    try:
        source = json.loads(path.read_text()).get("source")
    except OSError as e:
        raise SetupError(f"{path} cannot be read ({e.strerror}); {RESTORE} puts back what git holds") from None
    except ValueError:
        raise SetupError(f"{path} is not valid JSON; {RESTORE} puts back what git holds") from None
    if not isinstance(source, str):
        raise SetupError(f"{path} holds no candidate source (a baseline's is harness/baselines/, or an older record)")
    return source


def restore_records(path: Path | None = None) -> tuple[list[str], list[str]]:
    """Put back the records records/ lacks (missing_records): from git's last commit where it holds
    them; a row's record that no commit holds is written as lost, its row's cells all that is left
    of it ("lost": why), so the check passes without pretending. (restored, lost), by exp."""
    path = path or results_path()
    rows = {r["exp"]: r for r in read_rows(path)}
    folder = path.parent / "records"
    restored, lost = [], []
    work = git_plumbing.top(path.parent)
    for exp in missing_records(path):
        blob = None if work is None else git_plumbing.show(work, "HEAD", os.path.relpath(folder / f"{exp}.json", work))
        if blob is not None:
            _common.atomic_write(folder / f"{exp}.json", blob, exclusive=True)
            restored.append(exp)
        elif exp in rows:
            stub = {"exp": exp, "status": rows[exp]["status"], "row": dict(rows[exp]),
                    "lost": f"records/{exp}.json was missing and no commit held it; written by records.py restore on "
                            f"{utc_now()} from its results.tsv row: its source and figures are lost"}
            _common.atomic_write(folder / f"{exp}.json", json.dumps(stub, indent=1), exclusive=True)
            lost.append(exp)
    return restored, lost


def lock_file(path: Path, wait: bool) -> Any:
    """An exclusive lock on `path`, held while the returned file is open (the OS frees it if the
    process dies). wait=False: the holder's note (a str) at once when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        return holder
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}, since {utc_now()}")
    f.flush()
    return f


@contextlib.contextmanager
def records_lock() -> Iterator[None]:
    """One writer of results.tsv, leaderboard.md, records/ and PROGRESS.md at a time; the others wait."""
    f = lock_file(_common.root() / "runs" / "records.lock", wait=True)
    try:
        yield
    finally:
        f.close()


def next_exp_id(rows: list[dict[str, str]]) -> str:
    nums = [int(r["exp"][1:]) for r in rows if re.fullmatch(r"e\d+", r["exp"])]
    return f"e{max(nums, default=0) + 1:03d}"


def baseline_row(rows: list[dict[str, str]], preset: str, gpu: str | None = None) -> dict[str, str] | None:
    """The baseline in force for a preset (on a GPU, when given): the latest baseline row."""
    base = [r for r in rows if r["status"] == "baseline" and r["preset"] == preset and gpu in (None, r["gpu"])]
    return base[-1] if base else None


def keepers(rows: list[dict[str, str]], preset: str, gpu: str | None = None) -> list[dict[str, str]]:
    """The baseline in force for the preset and the keeps since it, in order; [] without one."""
    base = baseline_row(rows, preset, gpu)
    if base is None:
        return []
    since = rows[rows.index(base):]
    return [r for r in since if r["status"] in KEEPERS and r["preset"] == preset and r["gpu"] == base["gpu"]]


def best_row(rows: list[dict[str, str]], preset: str, gpu: str | None = None,
             better: str = "lower") -> dict[str, str] | None:
    """The best keeper (baseline or keep) since the baseline in force for the preset."""
    return min(keepers(rows, preset, gpu), key=lambda r: sort_key(r, better), default=None)


def current_row(rows: list[dict[str, str]], preset: str, gpu: str | None = None) -> dict[str, str] | None:
    """The keeper whose source the candidate file holds: the latest keep since the baseline in
    force, else that baseline. It is not best_row after a keep by the warm-up rule, whose metric
    may be a little worse (within the noise threshold) than the best's."""
    return next(reversed(keepers(rows, preset, gpu)), None)


def metric_value(row: dict[str, str]) -> float:
    """The row's metric (seconds for a latency, tokens/s for a throughput); legacy rows: median_s."""
    return Row.of(row).metric_value


def sort_key(row: dict[str, str], better: str) -> float:
    return metric_value(row) if better == "lower" else -metric_value(row)


def _span(exps: list[str]) -> str:
    return ", ".join(exps) if len(exps) <= 5 else f"{exps[0]}..{exps[-1]}"


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("action", choices=["leaderboard", "show", "restore", "source"])
    p.add_argument("exp", nargs="?", help="with source: the experiment (e005)")
    a = p.parse_args(argv)
    try:
        if a.action == "source":
            sys.stdout.write(recorded_source(a.exp))
            return 0
        if a.action == "restore":
            with records_lock():
                added = restore()
                restored, lost = restore_records()
            _common.emit([f"{results_path().name}: " + (f"put back {_common.plural(len(added), 'row')} ({_span(added)})"
                                                         if added else "nothing to put back"),
                          "records/: " + (f"put back {_common.plural(len(restored), 'record')} from git's last commit "
                                          f"({_span(restored)})" if restored else "nothing to put back from git")
                          + (f"; {_common.plural(len(lost), 'record')} no commit held ({_span(lost)}) written as lost, "
                             "from their rows" if lost else "")],
                         {"added": ",".join(added), "rows": len(read_rows()), "records_restored": ",".join(restored),
                          "records_lost": ",".join(lost)})
            return 0
        rows = read_rows()
    except SetupError as e:
        print(f"records: {e}", file=sys.stderr)
        return 2
    if a.action == "leaderboard":
        here = (rows[-1]["preset"], rows[-1]["gpu"]) if rows else None  # the last run's machine first
        from harness.leaderboard import write_leaderboard  # it reads this module's rows

        write_leaderboard(rows, goals=_common.load_goals(), here=here)
        _common.emit([f"leaderboard regenerated from {len(rows)} rows"], {"rows": len(rows), "out": str(leaderboard_path())})
    else:
        _common.emit([r["exp"] + "  " + r["status"] + "  " + r["median_s"] + "  " + r["desc"] for r in rows], {"rows": len(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
