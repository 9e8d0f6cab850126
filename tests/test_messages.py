"""Every path a user takes, answered in one voice (issue 43, items 1, 4 and 6): the next step
depends on the target, the device and the outcome; the timing line never judges what the verdict
judges; the quality strip and the row say which figure each is; a run's output ends with this
machine's rows and what they mean.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import add_record, use
from harness.cli import new_target
from harness.ledger import results, rows as R, summary
from harness.goals import parse
from harness.cli.experiment_pair import strip_title

REPO = Path(__file__).resolve().parent.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder
CPU, GPU = "CPU (x86_64, 2 cores)", "NVIDIA H100 80GB HBM3"


def result(status: str, gpu: str = CPU, exp: str = "e005", **row: object) -> dict:
    return {"exp": exp, "status": status, "row": {"preset": "tiny", "gpu": gpu, "desc": "d", **row}}


def target(tmp_path: Path, which: str) -> Path:
    """A goals file of each kind, where the harness looks for it: the repository's VAE, the LLM,
    a scaffolded target."""
    if which == "scaffold":
        new_target.scaffold("demo", tmp_path / "targets" / "demo")
        return tmp_path / "targets" / "demo"
    folder = tmp_path / which
    folder.mkdir()
    shutil.copy(REPO / "targets" / ("wan-vae" if which == "vae" else "llm-decode") / "goals.json", folder / "goals.json")
    return folder


def next_step(ws: Path, r: dict) -> str:
    with use(ws):
        return summary.next_step(r, parse(json.loads((ws / "goals.json").read_text()), ws / "goals.json", complete=True))


def test_the_next_step_depends_on_target_device_and_outcome(tmp_path: Path) -> None:
    """Issue 43: every CPU run, on the LLM and a scaffolded target too, and after a crash, said
    "optimize.py is written for a GPU ... Next: the same command on a GPU machine"."""
    vae, llm, scaffold = (target(tmp_path, w) for w in ("vae", "llm", "scaffold"))
    for ws in (vae, llm, scaffold):
        for status in ("keep", "revert", "crash", "inconclusive"):
            assert "written for a GPU" not in next_step(ws, result(status))
    crash = next_step(llm, result("crash"))
    assert crash.startswith("Next: fix what 'why' says above in optimize.py") and "records/e005.json" in crash, crash
    assert "auto-optim records source e005" in crash and "GPU" not in crash, crash
    quiet = next_step(vae, result("inconclusive", GPU) | {"note": "optimize.py restored to e004, the current keeper"})
    assert "Run the candidate again (auto-optim records source e005 > optimize.py brings it back first) when " \
           "the machine is quieter" in quiet and "GPU" not in quiet, quiet
    assert next_step(vae, result("inconclusive")).endswith("or on a GPU machine."), next_step(vae, result("inconclusive"))
    stand_in = next_step(scaffold, result("keep"))
    assert "still new_target.py's stand-in" in stand_in and "README.md in demo/" in stand_in, stand_in
    cpu = next_step(llm, result("keep"))
    assert cpu.startswith("On a CPU the tiny preset") and "AUTO_OPTIM_GOALS=" in cpu and "llm/goals.json" in cpu, cpu
    default = next_step(REPO / "targets" / "wan-vae", result("keep"))  # pyproject.toml's target: no option, no variable
    assert "AUTO_OPTIM_GOALS" not in default and "--target" not in default, default
    other = next_step(REPO / "targets" / "llm-decode", result("keep"))  # another of targets/: named by --target
    assert "AUTO_OPTIM_GOALS" not in other and "auto-optim run --target llm-decode --desc" in other, other
    assert next_step(vae, result("revert", GPU)).startswith("Next: read the keeper's profile")


def test_the_timing_line_never_judges_what_the_verdict_judges(tmp_path: Path) -> None:
    """Issue 43: one block printed "within the noise: the timed calls spread more than the two
    medians differ" and "kept: faster than e119 by 11.3% ... beyond the 1% noise threshold". The
    timing line states figures; only the verdict says whether it is a gain."""
    goals = parse(json.loads((VAE / "goals.json").read_text()), VAE / "goals.json", complete=True)
    base = {"exp": "e119", "median_s": "5.0", "spread_s": "3.9", "status": "baseline"}
    for status in ("keep", "revert", "inconclusive"):
        r = result(status, median_s=4.5, spread_s=3.5, quality=89.6, speedup_vs_fp32=1.11)
        r.update(range_s=(2.0, 5.5), calls_checked=7)
        line = summary.timing_line(r, goals, base)
        assert "noise" not in line and "within" not in line, line
        assert "PSNR (dB) 89.6 against the reference (the worst of 7 checked outputs)" in line, line
        assert ("1.11x the fp32 eager baseline's median" in line) == (status == "keep"), line


def test_the_strip_and_the_row_say_which_figure_each_is() -> None:
    """Issue 43: the strip said 124.4 dB where the row said 89.6 dB: one frame of the benchmark
    input's output against the worst whole output of every checked call."""
    title = strip_title("bf16", {"index": 3, "count": 9, "quality": 124.4},
                        {"quality": 89.6, "benchmark_quality": 118.0, "checked": [{}] * 7}, "PSNR (dB)")
    assert "PSNR (dB) 124.4 on this frame (118 over the whole output)" in title, title
    assert "the row's PSNR (dB) 89.6 is the worst over all 7 checked outputs" in title and "not this frame's" in title


def test_a_run_ends_with_this_machines_rows_and_what_they_mean(tmp_path: Path) -> None:
    """The Quickstart need not `cat leaderboard.md` (150 lines of H100/H200 tables): the summary ends
    with this machine's rows since its baseline, and a line for each status among them."""
    path = tmp_path / "results.tsv"
    cells = {"preset": "tiny", "gpu": CPU, "spread_s": 0.01}
    add_record(tmp_path, cells | {"exp": "e001", "status": "keep", "median_s": 9.0, "metric": 9.0, "gpu": GPU, "desc": "theirs"})
    for exp, status, median, x in (("e002", "baseline", 0.4, 1.0), ("e003", "keep", 0.2, 2.0), ("e004", "crash", None, None),
                                   ("e005", "inconclusive", 0.21, 1.9)):
        add_record(tmp_path, cells | {"exp": exp, "status": status, "median_s": median, "metric": median,
                                      "speedup_vs_fp32": x, "desc": f"run {exp}"})
    goals = parse(json.loads((REPO / "tests" / "toy_target" / "goals.json").read_text()), path, complete=True)
    lines = summary.your_rows(results.read(path), goals, "tiny", CPU)
    assert lines[0].startswith(f"This machine's rows (preset tiny, {CPU}) since the baseline e002")
    assert [ln.split()[0] for ln in lines[1:5]] == ["e002", "e003", "e004", "e005"]  # not the H100's e001
    assert "0.2 s" in lines[2] and "2.00x" in lines[2] and lines[3].split()[2] == "-"
    meaning = lines[-4:]
    assert [m.split(":")[0].strip() for m in meaning] == ["baseline", "keep", "crash", "inconclusive"], lines
    assert "run it again on a quieter machine" in meaning[-1]
