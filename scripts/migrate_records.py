"""One-off (issue 42, item 4): turn a target's records/ of the older shapes into the Record type the
store writes, and give every results.tsv row a record. Run once per target, by a person, in a clean
checkout: `python scripts/migrate_records.py targets/wan-vae`. Then results.tsv is written from records/
and must equal the file it replaced cell for cell (tests/test_ledger_migration.py checks the result).

For each records/eNNN.json: its fields go into the Record's (the candidate's source to
records/sources/<sha256>.py, the record keeping the hash); fields no Record has (the first records'
`verify` and `bench`) go into `legacy`, as they were; what only the row held (a keeper's commit and
its speedup, added to records from e056; the first 14 records' status and figures) is taken from the
row, and `migrated` names those fields. A row no record held becomes a record made from the row
alone, `migrated` saying so. Every record is written anew and signed with the key of the machine
that runs this (harness/ledger/signing.py): an older record was not signed at all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.ledger import results
from harness.ledger.record import FIELDS, Record, record_from_row
from harness.ledger.rows import COLUMNS
from harness.ledger.store import Store, utc_now


def migrate(target: Path) -> dict[str, int]:
    store = Store(target / "records")
    rows = {r["exp"]: r for r in results.read(target / "results.tsv")}
    when = utc_now()
    counts = {"records": 0, "from_rows": 0, "cells_as_text": 0}
    for exp, row in rows.items():
        path = store.path(exp)
        how = {"from": f"records/{exp}.json and its results.tsv row" if path.is_file() else "its results.tsv row alone "
               "(no record held it)", "on": when, "signed": "re-signed by the migration with the key of the machine "
               "that ran scripts/migrate_records.py: no older record was signed"}
        if not path.is_file():
            rec = record_from_row(row, migrated=how)
            counts["from_rows"] += 1
            source = None
        else:
            old = json.loads(path.read_text())
            source = old.pop("source", None)
            strip = old.pop("strip_png", None)
            if strip is not None:
                raise SystemExit(f"{path}: holds a picture; put it in quality/ first")
            from_row = record_from_row(row).to_json()
            fields = {k: v for k, v in old.items() if k in FIELDS}
            taken = sorted(k for k, v in from_row.items() if k in FIELDS - {"exp", "legacy", "lost", "migrated", "facts"} and v is not None
                           and fields.get(k) is None)
            if not fields.get("facts"):
                taken.append("facts")
            data = {**fields, **{k: from_row[k] for k in taken}, "exp": exp}
            data["legacy"] = {k: v for k, v in old.items() if k not in FIELDS}
            rec = Record.from_json({**data, "migrated": {**how, "fields_from_row": taken}})
            counts["records"] += 1
        wrong = {c: row[c] for c in COLUMNS if rec.row()[c] != row[c]}
        if wrong:  # cells no field says as the row wrote them: kept as text
            rec.migrated = {**(rec.migrated or {}), "cells": wrong}
            counts["cells_as_text"] += 1
        path.unlink(missing_ok=True)
        store.write(rec, source=source)
    extra = sorted(set(store.exps()) - set(rows))
    if extra:
        raise SystemExit(f"records without a row: {extra}")
    results.write(store, target / "results.tsv")
    return counts


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        print(folder, migrate(Path(folder)))
