"""harness/ledger/plots.py: the progress picture from a small results.tsv, and the quality strip."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("matplotlib", reason="matplotlib is not installed")

from harness.ledger import plots  # noqa: E402
from harness.ledger.record import Record  # noqa: E402
from harness.ledger.rows import COLUMNS  # noqa: E402
from harness.ledger.store import Store  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _row(exp: str, status: str, median: str, gpu: str = "H100", preset: str = "tiny") -> str:
    values = dict.fromkeys(COLUMNS, "")
    values.update(exp=exp, status=status, median_s=median, gpu=gpu, preset=preset, desc=f"try {exp}")
    return "\t".join(values[c] for c in COLUMNS)


def test_render_progress_writes_png(tmp_path):
    rows = [_row("e001", "baseline", "10.0"), _row("e002", "keep", "6.0"),
            _row("e003", "revert", "6.5"), _row("e004", "gate_fail", ""),
            _row("e005", "crash", ""), _row("e006", "keep", "4.1"),
            _row("e007", "keep", "9.0", gpu="other"),  # another GPU: left out
            _row("e008", "timeout", "")]
    tsv = tmp_path / "results.tsv"
    tsv.write_text("\t".join(COLUMNS) + "\n" + "\n".join(rows) + "\n")
    out = plots.render_progress(tsv, tmp_path / "progress.png")
    assert out is not None and out.read_bytes()[:8] == PNG
    speed = {"name": "tokens_per_s", "unit": "tok/s", "better": "higher"}
    assert plots.render_progress(tsv, tmp_path / "speed.png", {"metric": speed}).read_bytes()[:8] == PNG
    assert plots.floor_seconds(tsv, {"exp": "e006"}) is None  # no record: no floor line, no error
    Store(tmp_path / "records").write(Record(exp="e006", status="keep", desc="try e006", preset="tiny",
                                             facts={"floor_s": 2.5}))
    assert plots.floor_seconds(tsv, {"exp": "e006"}) == 2.5


def test_best_so_far_restarts_at_each_baseline():
    statuses = ("baseline", "keep", "revert", "rerun", "baseline", "gate_fail", "keep")
    times = ["10.0", "3.0", "2.0", "2.9", "11.0", "", "3.2"]
    rows = [{"status": s, "median_s": t, "preset": "tiny", "gpu": "H100"} for s, t in zip(statuses, times)]
    # A revert or re-run never lowers the line; the second baseline starts a new comparison.
    assert plots.best_so_far(rows) == [10.0, 3.0, 3.0, 3.0, 11.0, 11.0, 3.2]
    assert plots.best_so_far([{"status": "revert", "median_s": "5.0", "preset": "tiny", "gpu": "H100"}]) == [None]
    # a throughput: higher is better, so the line only rises
    speeds = [{"status": s, "median_s": "1", "metric": m, "preset": "tiny", "gpu": "H100"}
              for s, m in (("baseline", "10"), ("keep", "30"), ("revert", "20"), ("keep", "45"))]
    assert plots.best_so_far(speeds, "higher") == [10.0, 30.0, 30.0, 45.0]


def test_render_progress_empty_file(tmp_path):
    tsv = tmp_path / "results.tsv"
    tsv.write_text("\t".join(COLUMNS) + "\n")
    assert plots.render_progress(tsv, tmp_path / "p.png") is None


def test_quality_strip_writes_png(tmp_path):
    g = torch.Generator().manual_seed(0)
    reference = torch.rand(3, 32, 48, generator=g) * 2 - 1
    candidate = (reference + 0.01 * torch.randn(3, 32, 48, generator=g)).clamp(-1, 1)
    out = plots.quality_strip(reference, candidate, tmp_path / "strip.png", amplify=10)
    assert out.read_bytes()[:8] == PNG
    with pytest.raises(ValueError):
        plots.quality_strip(reference, candidate[:, :16], tmp_path / "bad.png")


def test_a_lone_wrong_pixel_stays_in_the_scaled_down_difference():
    """A 720p frame's panel is a third of its width: the difference keeps each block's largest value."""
    import numpy as np

    reference = np.full((704, 1280, 3), 128, dtype=np.uint8)
    candidate = reference.copy()
    candidate[301, 641] = 0
    difference = plots.amplified_difference(reference, candidate)
    assert np.asarray(plots._panel(difference, amplified=True)).max() == 255
    assert np.asarray(plots._panel(difference)).max() < 64  # averaged, it would all but vanish
