"""results.tsv: the table of every record (one row each, made by Record.row), written whole from records/ after every record and never by hand; its one parser; and the check and restore that keep records/ holding every row."""

from __future__ import annotations

import os
from pathlib import Path

from harness import console, _common
from harness.ledger import git_plumbing
from harness.ledger.record import record_from_row
from harness.ledger.rows import HEADER, Row, exp_number, parse, row_line
from harness.ledger.store import Store, utc_now
from harness.errors import Refused

RESTORE = "auto-optim records restore"


def results_path() -> Path:
    return _common.root() / "results.tsv"


def rows(store: Store | None = None) -> list[Row]:
    """Every record's row, in exp order: what results.tsv holds once written."""
    return [rec.row() for rec in (store or Store.here()).records()]


def render(table: list[Row]) -> str:
    return HEADER + "".join(row_line(r) for r in table)


def write(store: Store | None = None, path: Path | None = None) -> list[Row]:
    """Write results.tsv from records/ (replaced whole, atomically; untouched when already so)."""
    store, path = store or Store.here(), path or results_path()
    table = rows(store)
    text = render(table)
    if not path.is_file() or path.read_text() != text:
        _common.atomic_write(path, text)
    return table


def read(path: Path | None = None) -> list[Row]:
    """The rows of a results.tsv file (rows.parse, the one parser); [] when there is none. A damaged
    line is Refused, naming it."""
    path = path or results_path()
    if not path.is_file():
        return []
    table, damaged = parse(path.read_text())
    if damaged:
        n, _, why = damaged[0]
        raise Refused(f"{path} line {n} {why}; `{RESTORE}` writes it again from records/ (git diff {path.name} "
                         "shows what changed)")
    return table


def _by_exp(text: str | None) -> tuple[dict[str, Row], list[tuple[int, str, str]]]:
    """The whole rows of a results.tsv text by exp, and its damaged lines."""
    table, damaged = parse(text or "")
    return {r["exp"]: r for r in table}, damaged


def committed_text(path: Path | None = None) -> str | None:
    """results.tsv as git's last commit holds it; None without git, a commit or a tracked file."""
    path = path or results_path()
    work = git_plumbing.top(path.parent)
    blob = git_plumbing.show(work, "HEAD", os.path.relpath(path, work)) \
        if work is not None else None
    return blob.decode(errors="replace") if blob is not None else None


def _span(exps: list[str]) -> str:
    return exps[0] + (f"..{exps[-1]}" if len(exps) > 1 else "")


def missing_records(store: Store, path: Path, committed: dict[str, str] | None) -> list[str]:
    """The experiments records/ lacks that git's last commit holds (`committed`: Store.committed), or a
    row of results.tsv (the file or git's last commit's): a record lost."""
    current = _by_exp(path.read_text() if path.is_file() else "")[0]
    want = set(committed or {}) | set(current) | set(_by_exp(committed_text(path))[0])
    return sorted(want - set(store.exps()), key=exp_number)


def check_complete(store: Store | None = None, path: Path | None = None) -> None:
    """Before a record is written: refuse (Refused, one line, nothing recorded) when records/ lacks a
    record git's last commit or a row of results.tsv holds (a run would number its record from the gap:
    the next exp is the store's), when it holds a record that neither git's last commit holds as it is
    nor this machine's key signed (one the harness did not write; without git, as before the store,
    records are taken as they are: the person's copy on a GPU machine), and when results.tsv says other than
    records/ (a hand edit: the next write would drop it). A results.tsv that lacks rows is no loss:
    the next record writes it whole."""
    store, path = store or Store.here(), path or results_path()
    committed = store.committed()  # None without git (a GPU machine's copy): nothing to tell a record by
    lost = missing_records(store, path, committed)
    if lost:
        raise Refused(f"records/ lacks {console.plural(len(lost), 'record')} ({_span(lost)}) that results.tsv or "
                         f"git's last commit holds; nothing recorded. Restore them with `{RESTORE}` (it takes them from "
                         f"git's last commit, as git checkout HEAD -- records/ would, and writes the rest from their "
                         f"rows, marked lost), then run again")
    sources = store.lost_sources()
    if sources:
        raise Refused(f"records/sources/ lacks the source of {console.plural(len(sources), 'record')} ({_span(sources)}) "
                         f"that git's last commit holds; nothing recorded. Restore them with `{RESTORE}`, then run again")
    stray = [] if committed is None else [e for e in store.exps() if not store.unchanged_since_commit(e, committed)
                                          and not store.signed(e)]
    if stray:
        raise Refused(f"records/{stray[0]}.json is neither as git's last commit holds it nor signed with this "
                         f"person's key: the harness did not write it; nothing recorded. Put it back (git checkout "
                         f"HEAD -- records/) or remove it, then run again")
    view = {r["exp"]: r for r in rows(store)}
    differs = [r["exp"] for r in read(path) if view.get(r["exp"]) != r]
    if differs:
        raise Refused(f"{path.name} row {differs[0]} is not the row records/{differs[0]}.json makes (results.tsv "
                         f"is written from records/, never by hand); nothing recorded. `{RESTORE}` writes it again "
                         f"(git diff {path.name} shows what changes), then run again")


def restore(store: Store | None = None, path: Path | None = None) -> tuple[list[str], list[str]]:
    """Put back what records/ lacks, then write results.tsv from it: a record git's last commit holds,
    as committed, and a source it holds; a record only a row of results.tsv (the file's or the last commit's) holds, written from
    that row and marked lost. Never drops a row: a damaged line no record holds, or a row the two
    files disagree on, refuse (Refused) and nothing is written. (restored from git, written as lost)."""
    store, path = store or Store.here(), path or results_path()
    current_text = path.read_text() if path.is_file() else ""
    current, damaged = _by_exp(current_text)
    committed_rows = _by_exp(committed_text(path))[0]
    committed = store.committed() or {}
    restored = [e for e in missing_records(store, path, committed) if e in committed and store.restore_from_git(e)]
    for exp in store.lost_sources():
        store.restore_source(exp)
    have = set(store.exps())
    unrecovered = [f"{path.name} line {n} ({exp})" for n, exp, _ in damaged if exp not in have and exp not in committed_rows]
    if unrecovered:
        raise Refused(f"{unrecovered[0]} is damaged and no commit or record holds that row: repair it by hand")
    orphans = {}
    for exp in sorted((set(current) | set(committed_rows)) - have, key=exp_number):
        mine, theirs = current.get(exp), committed_rows.get(exp)
        if mine is not None and theirs is not None and mine != theirs:
            raise Refused(f"row {exp} of {path.name} differs from the one in git's last commit and no record holds "
                             f"it; compare them (git diff {path.name}) and repair by hand")
        orphans[exp] = mine or theirs
    for exp, row in orphans.items():
        store.write(record_from_row(row, lost=f"records/{exp}.json was missing and no commit held it; written by "
                                    f"`{RESTORE}` on {utc_now()} from its results.tsv row: its source and figures "
                                    "beyond the row are lost"))
    write(store, path)
    return restored, list(orphans)
