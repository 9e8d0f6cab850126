"""The record store (harness/ledger/store.py) and the Record (harness/ledger/record.py): a record
written once and signed, a source stored once by its hash and checked when read, a record of a
field no Record has refused, a row made from a record reading back cell for cell."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.errors import Refused
from harness.ledger.record import FIELDS, MEASURED_FIELDS, STORED_FIELDS, Record, record_from_row
from harness.ledger.rows import COLUMNS, Row
from harness.ledger.store import Store


def test_the_fields_are_defined_once() -> None:
    """What the measuring half may write is a Record field (bar the source and the strip, which the
    store keeps as files), and every Record field has its check."""
    assert set(MEASURED_FIELDS) - {"source", "strip_png"} <= FIELDS
    assert set(STORED_FIELDS) == FIELDS == {f.name for f in dataclasses.fields(Record)}


def test_a_record_is_written_once_signed_its_source_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "records")
    one = Record(exp="e001", status="revert", desc="d", preset="tiny", facts={"median_s": 1.0})
    store.write(one, source="print('x')\n")
    store.write(Record(exp="e002", status="revert", desc="again", preset="tiny"), source="print('x')\n")
    assert len(list((store.folder / "sources").iterdir())) == 1  # the same source, once
    assert store.source("e001") == store.source("e002") == "print('x')\n"
    assert store.signed("e001") and store.read("e001") == one
    with pytest.raises(Refused, match="never written over"):
        store.write(Record(exp="e001", status="keep", desc="other", preset="tiny"))
    data = json.loads(store.path("e002").read_text())
    store.path("e002").write_text(json.dumps(data | {"desc": "changed"}))
    assert not store.signed("e002")  # changed after it was signed
    store.source_path(data["source_sha256"]).write_text("print('y')\n")
    with pytest.raises(Refused, match="does not hash to its name"):
        store.source("e001")
    store.path("e002").write_text(json.dumps(data | {"surprise": 1}))
    with pytest.raises(Refused, match="surprise"):  # no field a Record lacks
        store.read("e002")
    with pytest.raises(Refused, match="status"):
        store.write(Record(exp="e003", status="great", desc="d", preset="tiny"))
    with pytest.raises(Refused, match="eNNN"):
        store.path("../e004")  # a record's name is never a path


def test_a_row_made_into_a_record_reads_back_cell_for_cell() -> None:
    cells = dict.fromkeys(COLUMNS, "-") | {"exp": "e007", "status": "keep", "desc": "d", "preset": "full",
                                           "median_s": "1.00000001", "gpu": "H100", "versions": "torch 2.1 cuda 12"}
    rec = record_from_row(Row(cells), lost="a test")
    assert rec.row() == cells and rec.migrated == {"cells": {"median_s": "1.00000001"}}  # 6 digits cannot say it
    assert rec.facts["torch"] == "2.1" and rec.facts["cuda"] == "12"
