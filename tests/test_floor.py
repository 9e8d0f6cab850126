"""harness/decide/floor.py: the floor from executed work at a probed peak, and the stop rule's verdict,
on recorded H100 rows and on made-up ones."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import make_toy, tool
from harness.decide import floor
from harness.ledger import rows as R
from harness.ledger.record import Record
from harness.ledger.store import Store, lock_file
from harness.target import assets

REPO = Path(__file__).resolve().parent.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder
GOALS = json.loads((VAE / "goals.json").read_text())
RULE = GOALS["stop_rule"]
PEAK = {"peak": {"flops": {"rate": 750e12, "op": "a conv"}, "bytes": {"rate": 3e12, "op": "a copy"}}}
ADAPTER = SimpleNamespace(flops=lambda shape: 2.0e15, min_bytes=lambda shape: 6.0e9)


def annotated(goals: dict, executed_flops: float | None = None, **facts) -> dict:
    facts = {"median_s": 3.0, **facts}
    if executed_flops is not None:  # the worker's count: the candidate's claim
        facts["claims"] = {"executed_flops": executed_flops}
    floor.annotate(facts, goals, ADAPTER, [1], PEAK)
    return facts


def test_floor_uses_the_executed_flops_when_the_count_is_credible() -> None:
    f = annotated(GOALS, executed_flops=1.8e15)
    assert f["floor_s"] == pytest.approx(1.8e15 / 750e12) and f["floor_note"].startswith("executed FLOPs")
    assert f["x_floor"] == pytest.approx(3.0 / f["floor_s"])
    # A count far below the nominal FLOPs saw only part of the work: the nominal count is used, and said.
    f = annotated(GOALS, executed_flops=1.5e13)
    assert f["floor_s"] == pytest.approx(2.0e15 / 750e12) and "counter saw 0.8%" in f["floor_note"]
    f = annotated(GOALS)
    assert f["floor_s"] == pytest.approx(2.0e15 / 750e12) and "no count" in f["floor_note"]


def test_floor_of_a_memory_bound_target_and_without_a_probe() -> None:
    f = annotated({**GOALS, "floor": {"work": "bytes"}})
    assert f["floor_s"] == pytest.approx(6.0e9 / 3e12) and "bytes" in f["floor_note"]
    f = {"median_s": 3.0}
    floor.annotate(f, GOALS, ADAPTER, [1], None)
    assert f["floor_s"] is None and "never probed" in f["floor_note"]


def test_verdict_names_every_unmet_condition() -> None:
    stop, why = floor.verdict(RULE, 2.6, 2.5, 0.995, 0.02, attempts=8)
    assert stop and why == []
    stop, why = floor.verdict(RULE, 3.0, 2.5, 0.97, 0.10, attempts=3, largest="convolution")
    assert not stop and len(why) == 4
    assert "3 attempts" in why[0] and "busy 97.0%" in why[1] and "10.0% of kernel time is outside convolution (the candidate's profile claims it)" in why[2]
    assert "1.20x the floor" in why[3]
    stop, why = floor.verdict(RULE, 2.6, None, None, None, attempts=9)
    assert not stop and any("no recorded profile" in w for w in why) and any("no floor" in w for w in why)


def test_a_profile_alone_cannot_stop_the_loop() -> None:
    """Every figure the candidate's own profile gives says stop (a forger's profile would); without
    the harness's own busy measure the rule still says not yet, and says why."""
    stop, why = floor.verdict(RULE, 2.6, 2.5, None, 0.0, attempts=8, claimed_busy=1.0)
    assert not stop and len(why) == 1 and "did not measure" in why[0] and "claims 100.0%" in why[0]


def _profile_figures(md: str) -> tuple[float, float]:
    lines = md.splitlines()
    busy = next(ln for ln in lines if "busy fraction" in ln).rsplit(" ", 1)[1].rstrip("%")
    outside = next(ln for ln in lines if "outside the largest category" in ln).rsplit(" ", 1)[1].rstrip("%")
    return float(busy) / 100, float(outside) / 100


@pytest.mark.parametrize("exp", ["e018", "e022", "e024"])
def test_todays_optimize_py_is_not_done(exp: str) -> None:
    """The shipped decoder's recorded H100 rows (e018: before this session's trims, its profile
    from the markdown; e022, e024: the trims on two machines, with the figures the record keeps):
    about a tenth of GPU time is outside the convolutions, so the rule must say not yet, and say why."""
    rec = json.loads((VAE / "records" / f"{exp}.json").read_text())
    busy, outside = (rec["profile"]["busy_fraction"], rec["profile"]["outside_largest"]) if rec.get("profile") \
        else _profile_figures((VAE / "profiles" / f"{exp}.md").read_text())
    f = rec["facts"]
    floor.annotate(f, GOALS, ADAPTER, [1], PEAK)  # e018 predates floors: at J's probed 750 TFLOP/s
    stop, why = floor.verdict(RULE, f["median_s"], f["floor_s"], busy, outside, attempts=RULE["plateau_attempts"],
                              largest="convolution")
    assert outside > 0.09 and not stop
    assert any("outside convolution" in w for w in why), why


def test_verdict_for_rows_reads_results_and_the_best_record(tmp_path: Path) -> None:
    """The rows after the best one count as attempts; the best row's record gives its floor and profile."""
    def row(exp: str, status: str, median: str) -> dict:
        return {"exp": exp, "status": status, "median_s": median, "metric": median, "preset": "full", "gpu": "H100"}

    rows = [row("e001", "baseline", "10"), row("e002", "keep", "2.6"), row("e003", "revert", "2.7"),
            row("e004", "rerun", "2.6")] + [row(f"e{i:03d}", "revert", "2.8") for i in range(5, 12)]
    Store(tmp_path).write(Record(exp="e002", status="keep", desc="d", preset="full",
                                 facts={"median_s": 2.6, "floor_s": 2.45, "device_busy": 0.995},
                                 profile={"busy_fraction": 0.995, "outside_largest": 0.02, "largest_category": "convolution"}))
    goals = {**GOALS, "presets": {"full": {"input_shape": [1]}}}
    stop, why, best = floor.verdict_for_rows(rows, goals, "full", "H100", None, ADAPTER, tmp_path)
    assert best == "e002" and stop, why  # 8 attempts: e003 and e005-e011 (a rerun is not one)
    stop, why, _ = floor.verdict_for_rows(rows[:-1], goals, "full", "H100", None, ADAPTER, tmp_path)
    assert not stop and why == ["7 attempts since the best row; the plateau needs 8"]
    older = json.loads((tmp_path / "e002.json").read_text())
    del older["facts"]["device_busy"]  # a record from before the harness measured it: the profile alone
    (tmp_path / "e002.json").write_text(json.dumps(older))
    stop, why, _ = floor.verdict_for_rows(rows, goals, "full", "H100", None, ADAPTER, tmp_path)
    assert not stop and len(why) == 1 and "claims 99.5%" in why[0]
    assert R.best_row(rows, "full", "H100")["exp"] == "e002"


def test_probe_on_this_machine(at_toy: Path) -> None:
    """The generic probes (a matmul and a copy) on a CPU, written once and read back."""
    from harness import _common as C

    peak, made = floor.ensure_peak("cpu", C.load_adapter(C.load_goals()), force=True)
    again, made_again = floor.ensure_peak("cpu", None)
    assert made and not made_again and again == peak
    assert peak["peak"]["flops"]["rate"] > 0 and peak["peak"]["bytes"]["rate"] > 0
    assert floor.peak_path(peak["gpu"]).parent == assets.assets_dir()


def test_flop_counter_counts_matmuls_with_an_output_dtype() -> None:
    """optimize.py's Winograd GEMM is torch.bmm(fp16, fp16, out_dtype=fp32); torch's own counter
    raises on it, which left e031/e032 without an executed count (their floor fell back to nominal)."""
    import torch

    from harness.worker.calls import flop_counter

    a, b = torch.empty(2, 4, 8, dtype=torch.float16, device="meta"), torch.empty(2, 8, 3, dtype=torch.float16, device="meta")
    with flop_counter() as counter:
        torch.bmm(a, b, out_dtype=torch.float32)
        torch.bmm(a, b)
        torch.mm(a[0], b[0], out_dtype=torch.float32)
    assert counter.get_total_flops() == 2 * (2 * 2 * 4 * 8 * 3) + 2 * 4 * 8 * 3


def test_winograd_gemms_count_as_the_dominant_work() -> None:
    """e034's profile: its Winograd convs run as cuBLAS GEMMs (attention/matmul by kernel name).
    Pooled with the convolutions, 13.6% of kernel time is outside them (the transforms, norms,
    residual sums, copies), not the 23.6% the convolution class alone would leave."""
    from harness.measure.profile import dominant

    md = (VAE / "profiles" / "e034.md").read_text()
    cats = {}
    for ln in md.split("## GPU time by category")[1].split("## Top kernels")[0].splitlines():
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) == 3 and cells[1].replace(".", "").isdigit():
            cats[cells[0]] = float(cells[1])
    name, seconds = dominant(cats)
    assert name == "convolution + attention/matmul" and seconds == pytest.approx(2.0616 + 0.2696)
    outside = 1 - seconds / sum(cats.values())
    assert outside == pytest.approx(0.136, abs=0.001)
    stop, why = floor.verdict(RULE, 2.719, 2.168, 0.993, outside, attempts=8, largest=name)
    assert not stop and any("13.6% of kernel time is outside convolution + attention/matmul" in w for w in why), why


def test_a_probe_waits_for_the_device(tmp_path: Path) -> None:
    """The agent may run floor.py beside a measurement: on a machine not yet probed, its probe
    waits for the device lock rather than measure low rates, stored for good, beside the other."""
    ws = make_toy(tmp_path / "ws")
    for f in (ws / "assets").glob("peak-*.json"):
        f.unlink()
    held = lock_file(ws / "runs" / "device_0.lock", wait=False)
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json"), "CUDA_VISIBLE_DEVICES": ""}
    probe = subprocess.Popen([*tool("harness.decide.floor", ws), "--device", "cpu"], cwd=ws, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        said = probe.stderr.readline()  # its first line: that it waits for the device
        assert "is measuring" in said and "waiting for it" in said, said
        with pytest.raises(subprocess.TimeoutExpired):
            probe.wait(timeout=3)  # and it does wait, while the device is held
    finally:
        probe.kill()
        probe.wait()
        held.close()
    assert not list((ws / "assets").glob("peak-*.json")), "it probed while the device was held"
    r = subprocess.run([*tool("harness.decide.floor", ws), "--device", "cpu"], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and list((ws / "assets").glob("peak-*.json")), r.stderr[-1000:]


def test_verdict_on_a_cpu_says_a_cpu_has_no_floor(at_toy: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 43: `floor.py --verdict` on a CPU said "no floor on this machine (python harness/decide/floor.py
    probes it)", a command that changes nothing there. It now says plainly that a CPU has no floor, and
    names the commands a person and the agent type on the GPU machine."""
    assert floor.main(["--verdict", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "A CPU has no floor" in out and "ask for the verdict on the GPU machine (`auto-optim floor --verdict`" in out, out
    assert "auto-optim floor probes it" not in out and "auto-optim profile" not in out, out
