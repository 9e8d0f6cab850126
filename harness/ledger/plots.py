"""Pictures of progress (from results.tsv's rows) and quality (a keeper's strip).

Usage:
    python -m harness.ledger.plots [--results results.tsv] [--out PNG]

`render_progress(results_tsv, out_png, goals, preset, gpu)`: the metric per experiment (goals.json
"metric": a median latency, or a throughput where higher is better) of one preset + machine (the
most recent, unless named), the
best-so-far line through the keepers (restarting at each baseline), gate failures / crashes /
timeouts / tampered runs marked along the edge, and for a latency the best row's floor (its record's
floor_s: harness/decide/floor.py) as a dashed line.
`quality_strip(reference_frame, candidate_frame, out_png, amplify=...)`: reference | candidate |
amplified |difference| of one frame, labelled (drawn with Pillow).
`progress_path(root, preset, gpu)`: where a preset + machine's picture lives, progress/<preset>-<machine>.png:
one per machine, so a CPU run never redraws (or commits over) a GPU's picture.

matplotlib is imported lazily (the GPU machine has none; callers skip the picture there).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from harness import console, paths, _common
from harness.goals import as_goals
from harness.ledger import results, rows as R
from harness.ledger.store import Store
from harness.errors import Refused

FAILED = R.RED
DEFAULT_AMPLIFY = 20.0


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, out_png: Path, dpi: int) -> Path:
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=dpi)
    plt.close(fig)
    return out_png


def _float(text: str | None) -> float | None:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def floor_seconds(results_tsv: Path, best: dict[str, str] | None) -> float | None:
    """The floor of the best row, as its record says (harness/decide/floor.py: the executed FLOPs at the
    measuring machine's probed peak); None when it has none."""
    if best is None:
        return None
    store = Store(Path(results_tsv).parent / "records")
    try:
        return _float(str(store.read(best["exp"]).facts.get("floor_s"))) if store.has(best["exp"]) else None
    except Refused:
        return None


def best_so_far(rows: list[dict[str, str]], better: str = "lower") -> list[float | None]:
    """At each row, the value the keep rule judged against: rows.best_row over the rows so far
    (the best keeper since the last baseline of that preset and GPU)."""
    line = []
    for i, row in enumerate(rows):
        best = R.best_row(rows[:i + 1], row["preset"], row["gpu"], better)
        line.append(R.metric_value(best) if best else None)
    return line


def _value(row: dict[str, str]) -> float | None:
    try:
        return _float(str(R.metric_value(row)))
    except (TypeError, ValueError):
        return None


def progress_path(root: Path, preset: str, gpu: str) -> Path:
    return Path(root) / "progress" / f"{preset}-{console.slug(gpu)}.png"


def render_progress(results_tsv: Path, out_png: Path, goals: dict[str, Any] | None = None,
                    preset: str | None = None, gpu: str | None = None) -> Path | None:
    """Draw the picture of one preset + machine (default: the last row's); returns its path, or
    None when there is nothing to draw."""
    spec = as_goals(goals).metric_spec
    better = spec["better"]
    rows = results.read(Path(results_tsv))
    if not rows:
        return None
    preset, gpu = preset or rows[-1].get("preset", ""), gpu or rows[-1].get("gpu", "")
    rows = [r for r in rows if r.get("preset") == preset and r.get("gpu") == gpu]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5))

    xs = list(range(len(rows)))
    times = [_value(r) for r in rows]
    known = [t for t in times if t is not None]
    edge = (max(known) * 1.6 if better == "lower" else min(known) / 1.6) if known else 1.0
    styles = {"baseline": ("s", "tab:blue", "baseline"), "keep": ("o", "tab:green", "keep"),
              "revert": ("o", "0.6", "revert (no gain)"),
              "inconclusive": ("^", "tab:orange", "inconclusive (too noisy to tell: not kept)"),
              "rerun": ("D", "tab:purple", "re-run of a keeper")}
    for status, (marker, color, label) in styles.items():
        pts = [(x, t) for x, t, r in zip(xs, times, rows) if r.get("status") == status and t is not None]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, color=color, label=label, zorder=3)
    fails = [(x, r["status"]) for x, r in zip(xs, rows) if r.get("status") in FAILED]
    if fails:  # no trustworthy time: mark them along the top of the axis
        ax.scatter([x for x, _ in fails], [edge] * len(fails), marker="x", color="tab:red",
                   label="gate fail / crash / timeout / tampered", zorder=3)

    # One line per comparison: each baseline starts a new one, unconnected to the last.
    segments: list[list[tuple[int, float]]] = []
    for x, b, r in zip(xs, best_so_far(rows, better), rows):
        if b is None:
            continue
        if not segments or r.get("status") == "baseline":
            segments.append([])
        segments[-1].append((x, b))
    for i, seg in enumerate(segments):
        seg.append((seg[-1][0] + 0.5, seg[-1][1]))  # carry the last step to the next row
        label = f"best since its baseline ({segments[-1][-1][1]:.3g} {spec.get('unit', '')} now)" if i == 0 else None
        ax.step(*zip(*seg), where="post", color="tab:green", label=label)

    floor = floor_seconds(results_tsv, R.best_row(rows, preset, gpu, better)) if better == "lower" else None
    if floor:
        ax.axhline(floor, color="black", linestyle="--", label=f"floor of the best row {floor:.3g} s (its work at the probed peak)")
    ax.set_yscale("log")
    ax.set_xticks(xs, [r.get("exp", str(x)) for x, r in zip(xs, rows)],
                  rotation=90 if len(xs) > 15 else 0, fontsize=8)
    ax.set_xlabel("experiment")
    ax.set_ylabel(f"{spec['name']} ({spec.get('unit', '')}, log; {better} is better)")
    ax.set_title(f"preset {preset} on {gpu}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    return _save(plt, fig, out_png, dpi=120)


def _to_hwc_uint8(frame: Any):
    """A frame as H x W x 3 uint8: float frames are taken as [-1, 1], uint8 as is; CHW or HWC."""
    import numpy as np

    a = frame.detach().cpu().float().numpy() if hasattr(frame, "detach") else np.asarray(frame)
    if a.ndim == 3 and a.shape[0] == 3 and a.shape[-1] != 3:
        a = a.transpose(1, 2, 0)
    if a.dtype != np.uint8:
        a = np.clip(np.rint((a.astype(np.float64) + 1) * 127.5), 0, 255).astype(np.uint8)
    return a


def amplified_difference(reference_hwc, candidate_hwc, amplify: float = DEFAULT_AMPLIFY):
    """|reference - candidate| in 8-bit levels times `amplify`, clipped, as a grey RGB image."""
    import numpy as np

    diff = np.abs(reference_hwc.astype(np.float64) - candidate_hwc.astype(np.float64)).max(axis=2)
    grey = np.clip(diff * amplify, 0, 255).astype(np.uint8)
    return np.repeat(grey[:, :, None], 3, axis=2)


PANEL_PX = 400  # each panel's width in the strip: a tiny frame scaled up, a 720p one down


def _panel(image, amplified: bool = False):
    """One panel PANEL_PX wide. Scaling down keeps each block's largest value in the amplified
    difference (a lone wrong pixel must stay visible) and the block's mean in a frame."""
    import numpy as np
    from PIL import Image

    h, w = image.shape[:2]
    k = -(-w // PANEL_PX)  # pixels per panel pixel, rounded up
    if k > 1:
        padded = np.pad(image, ((0, -h % k), (0, -w % k), (0, 0)), mode="edge").astype(np.float64)
        blocks = padded.reshape(padded.shape[0] // k, k, padded.shape[1] // k, k, 3)
        image = (blocks.max(axis=(1, 3)) if amplified else blocks.mean(axis=(1, 3))).round().astype(np.uint8)
        h, w = image.shape[:2]
    return Image.fromarray(image).resize((PANEL_PX, max(1, round(h * PANEL_PX / w))), Image.Resampling.NEAREST)


def quality_strip(reference_frame: Any, candidate_frame: Any, out_png: Path,
                  amplify: float = DEFAULT_AMPLIFY, title: str = "") -> Path:
    """reference | candidate | amplified difference, side by side with labels. Drawn with Pillow
    (matplotlib's own image library): a strip is made for every passing candidate, where
    matplotlib's import and layout would cost most of a CPU run's harness time."""
    from PIL import Image, ImageDraw

    ref, cand = _to_hwc_uint8(reference_frame), _to_hwc_uint8(candidate_frame)
    if ref.shape != cand.shape:
        raise ValueError(f"frame shapes differ: {ref.shape} vs {cand.shape}")
    panels = [_panel(ref), _panel(cand), _panel(amplified_difference(ref, cand, amplify), amplified=True)]
    labels = ["reference (frozen fp32)", "candidate (optimize.py)", f"|difference| x{amplify:g}"]
    line, gap = 14, 8  # the default font's line height, and the space between panels
    top = line * (len(title.splitlines()) + 1) + gap
    strip = Image.new("RGB", (3 * PANEL_PX + 4 * gap, top + panels[0].height + gap), "white")
    draw = ImageDraw.Draw(strip)
    draw.multiline_text((gap, gap // 2), title, fill="black", spacing=2)
    for i, (panel, label) in enumerate(zip(panels, labels)):
        x = gap + i * (PANEL_PX + gap)
        draw.text((x, top - line), label, fill="black")
        strip.paste(panel, (x, top))
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    strip.save(out_png)
    return out_png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    paths.add_target_option(parser)
    parser.add_argument("--results", type=Path, default=None, help="default: results.tsv next to goals.json")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: progress/<preset>-<machine>.png next to goals.json, for the last row's")
    args = parser.parse_args(argv)
    results = args.results or _common.root() / "results.tsv"
    if not results.is_file():
        print(f"plots: no results file at {results}", file=sys.stderr)
        return 2
    rows = results.read(results)
    out = args.out or (progress_path(_common.root(), rows[-1]["preset"], rows[-1]["gpu"]) if rows else None)
    try:
        written = render_progress(results, out, _common.load_goals())
    except ImportError as e:
        print(f"plots: matplotlib is missing ({e}); no picture", file=sys.stderr)
        return 2
    print(f"progress: {written}" if written else "progress: nothing recorded yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
