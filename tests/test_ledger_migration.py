"""The worked examples' records after the migration to one record store (issue 42, item 4): every
record loads into the Record type, results.tsv written from records/ equals, row by row and cell
by cell, the results.tsv each target held before (tests/data/before-migration/, copied from the
commit before the migration), the committed results.tsv is exactly what records/ makes, and the
wan-vae records/ stays under 10 MB (4.2 MB before, the sources inline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from harness.ledger import results
from harness.ledger.rows import COLUMNS
from harness.ledger.store import Store

BEFORE = Path(__file__).resolve().parent / "data" / "before-migration"
TARGETS = ["wan-vae", "llm-decode"]


@pytest.mark.parametrize("name", TARGETS)
def test_the_view_of_the_store_is_the_results_tsv_of_before(name: str) -> None:
    target = REPO / "targets" / name
    store = Store(target / "records")
    records = store.records()  # every record loads (Record.from_json checks each field)
    assert [r.exp for r in records] == store.exps() and records
    before = results.read(BEFORE / f"{name}.results.tsv")  # the one parser: a legacy row's missing cells read "-"
    now = results.rows(store)
    # the rows of before, in order and cell for cell, then those recorded since the migration
    assert [r["exp"] for r in now[:len(before)]] == [r["exp"] for r in before]
    for old, new in zip(before, now):
        for column in COLUMNS:
            assert new[column] == old[column], (old["exp"], column)
    assert (target / "results.tsv").read_text() == results.render(now)  # the committed file is the view


@pytest.mark.parametrize("name", TARGETS)
def test_every_measured_source_is_stored_once_by_its_hash(name: str) -> None:
    store = Store(REPO / "targets" / name / "records")
    shas = {r.source_sha256 for r in store.records()} - {None}
    assert {p.stem for p in (store.folder / "sources").iterdir()} == shas
    migrated = {r["exp"] for r in results.read(BEFORE / f"{name}.results.tsv")}
    for exp in store.exps():
        rec = store.read(exp)
        if rec.source_sha256:
            assert store.source(exp) is not None  # read back, its hash checked
        if exp in migrated:
            assert rec.migrated is not None and "cells" not in rec.migrated  # every cell said by a field
        else:  # written by the store since
            assert rec.migrated is None, exp


def test_the_worked_example_records_stay_small() -> None:
    folder = REPO / "targets" / "wan-vae" / "records"
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 10 * 2**20, size
