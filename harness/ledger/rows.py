"""A results.tsv row: its columns, its cells as text (Row), the one parser of results.tsv's text, and the questions asked of a list of rows (the baseline in force, the best keeper, the next exp id). Standard library only: the agent's stop hook loads it by file location."""

from __future__ import annotations

import re
from typing import Any

COLUMNS = ["exp", "commit", "timestamp", "desc", "status", "median_s", "spread_s", "quality",
           "max_abs", "speedup_vs_fp32", "gpu", "preset", "weights", "frozen_hash", "candidate_sha",
           "versions", "wall_s", "sandbox", "metric"]
# Rows written before the worker harness: 16 cells, `psnr_db` where `quality` is now. The parser
# reads them as they are (the missing cells read "-"); the view written from records/ has 19 cells.
LEGACY_COLUMNS = COLUMNS[:7] + ["psnr_db"] + COLUMNS[8:16]
STATUSES = ("baseline", "keep", "revert", "inconclusive", "rerun", "gate_fail", "crash", "timeout", "tampered")
KEEPERS = ("baseline", "keep")
RED = ("gate_fail", "crash", "timeout", "tampered")
HEADER = "\t".join(COLUMNS) + "\n"
NUMBERS = ("median_s", "spread_s", "quality", "max_abs", "speedup_vs_fp32", "wall_s", "metric")


class Row(dict):
    """One results.tsv row. As a mapping, its cells as written (row["median_s"] is the text in the
    file, "-" for nothing); as attributes, what they mean: row.median_s is a float or None, and
    row.metric_value the figure the keep rule and the leaderboard compare."""

    @classmethod
    def of(cls, row: dict[str, Any]) -> "Row":
        return row if isinstance(row, Row) else cls(row)

    def number(self, column: str) -> float | None:
        text = self.get(column)
        if text in (None, "", "-"):
            return None
        try:
            return float(text)
        except (TypeError, ValueError):
            return None

    @property
    def median_s(self) -> float | None:
        return self.number("median_s")

    @property
    def spread_s(self) -> float | None:
        return self.number("spread_s")

    @property
    def quality(self) -> float | None:
        return self.number("quality")

    @property
    def speedup_vs_fp32(self) -> float | None:
        return self.number("speedup_vs_fp32")

    @property
    def metric_value(self) -> float:
        """Seconds for a latency, work per second for a throughput; legacy rows: median_s."""
        value = self.number("metric")
        return value if value is not None else float(self["median_s"])


def parse(text: str) -> tuple[list[Row], list[tuple[int, str, str]]]:
    """results.tsv's one parser: its whole rows, and its damaged lines (line number, first cell, what
    is wrong). Legacy rows (16 cells) are whole only before the first full one: after it a short
    line is a cut one; a last line without its newline is cut off mid-write."""
    lines = text.splitlines(True)
    header = lines[0].rstrip("\n").split("\t") if lines else COLUMNS
    if header not in (COLUMNS, LEGACY_COLUMNS):
        return [], [(1, "header", f"does not start with the expected header ({len(COLUMNS)} columns)")]
    rows, damaged, full = [], [], False
    for n, line in enumerate(lines[1:], 2):
        cells = line.rstrip("\n").split("\t")
        full = full or len(cells) == len(COLUMNS)
        if not line.endswith("\n"):
            damaged.append((n, cells[0] or "empty", "is cut off (no newline at its end: a half-written line?)"))
        elif len(cells) != len(COLUMNS) and (full or len(cells) != len(LEGACY_COLUMNS)) or exp_number(cells[0]) < 0:
            damaged.append((n, cells[0] or "empty", f"has {len(cells)} cells, expected {len(COLUMNS)} (a cut-off or "
                                                    "hand-edited line?)"))
        else:
            rows.append(Row(zip(COLUMNS, cells + ["-"] * (len(COLUMNS) - len(cells)))))
    return rows, damaged


def cell(v: Any) -> str:
    """A value as a results.tsv cell: "-" for nothing, a float in 6 significant digits, one line."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    # Tabs and newlines would break the table; desc comes from a person.
    return re.sub(r"[\t\r\n]+", " ", str(v)).strip() or "-"


def row_line(row: dict[str, Any]) -> str:
    return "\t".join(cell(row.get(c)) for c in COLUMNS) + "\n"


def exp_number(exp: str) -> int:
    return int(exp[1:]) if isinstance(exp, str) and re.fullmatch(r"e\d+", exp) else -1


def next_exp_id(rows: list[dict[str, str]]) -> str:
    nums = [exp_number(r["exp"]) for r in rows if exp_number(r["exp"]) >= 0]
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
