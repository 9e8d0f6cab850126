"""bench and profile through their CLIs on the toy target (cheap), the boundary's cost, and the
kernel-name classifier. The VAE goes through the same code in test_first_run.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import tool, use
from harness.measure import profile

CHEATERS = Path(__file__).resolve().parent / "cheaters"


def cli(ws: Path, *args: str) -> tuple[int, dict, str]:
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}
    p = subprocess.run([*tool(args[0], ws), *args[1:]], cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
    return p.returncode, (json.loads(last) if last.startswith("{") else {}), p.stdout + p.stderr


def test_bench_cli(toy: Path) -> None:
    rc, f, out = cli(toy, "harness.cli.bench", "--baseline")
    runs = json.loads((toy / "goals.json").read_text())["presets"]["tiny"]["timed_runs"]
    assert rc == 0 and f["runs"] == runs and len(f["times_s"]) == runs, out
    assert f["min_s"] <= f["median_s"] <= f["max_s"] and f["spread_s"] == f["max_s"] - f["min_s"]
    assert f["warmup_s"] >= f["build_s"] and f["input"].startswith("asset") and f["sandbox"].startswith("bwrap")
    assert len(f["checked"]) == 7 and f["passed"]  # every timed call, and the FLOP-counted one, was also checked
    assert f["claims"]["executed_flops"] == f["flops"] > 0  # counted in the worker: a claim (harness/decide/floor.py)
    # On a CPU a floor means nothing (issue 24: "the median is 0.69x the floor"): none, and no line says one.
    assert f["floor_s"] is None and "CPU" in f["floor_note"] and "  floor" not in out
    b = f["baseline"]
    assert b["fp32_eager_s"] > 0 and b["bf16_eager_s"] > 0
    assert b["speedup_vs_fp32"] == pytest.approx(b["fp32_eager_s"] / f["median_s"])
    assert "boundary" in out and 0 < f["boundary_s"] < 0.05  # handing a tiny input over and back


def bench_here(ws: Path, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, dict, str]:
    """cli(ws, "harness.cli.bench", *args) as bench.main in this process: the same exit code and
    lines without an interpreter start (the candidate still runs in a worker process)."""
    from harness.cli import bench

    with use(ws):
        rc = bench.main(list(args))
    out = capsys.readouterr()
    last = out.out.strip().splitlines()[-1] if out.out.strip() else "{}"
    return rc, (json.loads(last) if last.startswith("{") else {}), out.out + out.err


def test_bench_exit_codes(toy: Path, capsys: pytest.CaptureFixture) -> None:
    """What bench's exit code says; its command line runs in test_bench_cli."""
    rc, f, out = bench_here(toy, capsys, "--candidate", str(CHEATERS / "exits.py"))
    assert rc == 1 and "exited with code 3" in f["reason"], out
    rc, f, out = bench_here(toy, capsys, "--candidate", str(CHEATERS / "zeros.py"))
    assert rc == 1 and f["status"] == "gate_fail", out  # bench checks what it times
    rc, f, out = bench_here(toy, capsys, "--preset", "huge")
    assert rc == 2 and "unknown preset" in f["reason"], out


def test_profile_cli(toy: Path, tmp_path: Path) -> None:
    out_md = tmp_path / "toy.md"
    rc, f, out = cli(toy, "harness.cli.profile", "--out", str(out_md))
    assert rc == 0 and out_md.is_file(), out
    md = out_md.read_text()
    assert "## CPU time by category" in md and "busy fraction" in md and "outside the largest category" in md
    assert 0 <= f["outside_largest"] <= 1 and f["launches"] > 0


def test_classify() -> None:
    c = profile.classify
    assert c("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") == "convolution"
    assert c("nchwToNhwcKernel") == "copy/cat/pad" and c("Memcpy DtoD (Device -> Device)") == "copy/cat/pad"
    assert c("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>") == "copy/cat/pad"
    assert c("pytorch_flash::flash_fwd_kernel") == "attention/matmul" and c("ampere_bf16_s16816gemm") == "attention/matmul"
    assert c("triton_red_fused_native_layer_norm_0") == "norm/elementwise"
    assert c("void at::native::vectorized_elementwise_kernel<4, silu>") == "norm/elementwise"
    assert c("some_mystery_kernel") == "other"
    # The LLM target's kernels (profiles/e029 of targets/llm-decode): cuBLAS's Hopper GEMMs, cuDNN's
    # attention, and Inductor's fused pointwise kernels named after the ops they absorbed.
    assert c("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "attention/matmul"
    assert c("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35") == "attention/matmul"
    assert c("triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view") == "norm/elementwise"
