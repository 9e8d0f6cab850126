"""The type of a results.tsv row (harness/records.py reads and writes the file)."""

from __future__ import annotations

from typing import Any


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
