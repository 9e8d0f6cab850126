"""bench and profile: on the real model at the tiny preset (in-process, the session's model) and
through their CLIs on the toy target (cheap), plus the kernel-name classifier."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import bench, profile  # noqa: E402

TOY = Path(__file__).resolve().parent / "toy_target"
EAGER = 'def build_decoder(vae, z0):\n    return vae.decode, {"dtype": "float32"}\n'


@pytest.fixture
def eager(tmp_path: Path) -> Path:
    """A plain fp32 eager candidate: the repo's optimize.py changes as the project goes on."""
    path = tmp_path / "eager.py"
    path.write_text(EAGER)
    return path


def test_bench_real_model(workspace: Path, vae: torch.nn.Module, eager: Path) -> None:
    f = bench.measure(eager, "tiny", "cpu", runs=1, model=vae)
    assert f["runs"] == 1 and len(f["times_s"]) == 1
    assert f["min_s"] <= f["median_s"] <= f["max_s"] and f["spread_s"] == f["max_s"] - f["min_s"]
    assert f["warmup_s"] >= f["build_s"] and f["peak_mem_gb"] == "not measured"
    assert f["input"].startswith("asset") and f["info"]["dtype"] == "float32"
    assert f["flops"] > 1e9 and f["floor_s"] > 0 and 0 < f["pct_of_floor"] < 100
    assert f["torch"] == torch.__version__ and f["gpu"].startswith("CPU")


def test_profile_real_model(workspace: Path, vae: torch.nn.Module, eager: Path) -> None:
    r = profile.run_profile(eager, "tiny", "cpu", model=vae)
    assert r["launches"] > 100 and r["compile"] is None
    cats = r["by_category_s"]
    assert set(cats) == set(profile.CATEGORIES) and max(cats, key=cats.get) == "convolution"
    md = profile.to_markdown(r, "test")
    assert "## CPU time by category" in md and "| convolution |" in md and "busy fraction" in md


def test_classify() -> None:
    c = profile.classify
    assert c("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") == "convolution"
    assert c("nchwToNhwcKernel") == "copy/cat/pad" and c("Memcpy DtoD (Device -> Device)") == "copy/cat/pad"
    assert c("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>") == "copy/cat/pad"
    assert c("pytorch_flash::flash_fwd_kernel") == "attention/matmul" and c("ampere_bf16_s16816gemm") == "attention/matmul"
    assert c("triton_red_fused_native_layer_norm_0") == "norm/elementwise"
    assert c("void at::native::vectorized_elementwise_kernel<4, silu>") == "norm/elementwise"
    assert c("some_mystery_kernel") == "other"


def test_cli_on_toy(tmp_path: Path) -> None:
    ws = tmp_path / "toy"
    shutil.copytree(TOY, ws, ignore=shutil.ignore_patterns("__pycache__"))
    (ws / "harness").symlink_to(REPO / "harness")
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}

    def cli(*args: str) -> tuple[int, dict]:
        p = subprocess.run([sys.executable, *args], cwd=ws, env=env, capture_output=True, text=True, timeout=300)
        return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])

    rc, f = cli("harness/bench.py", "--baseline")
    assert rc == 0 and f["runs"] == 5 and "seeded" in f["input"]  # no asset: says it made the input
    b = f["baseline"]
    assert b["fp32_eager_s"] > 0 and b["bf16_eager_s"] > 0
    assert b["speedup_vs_fp32"] == pytest.approx(b["fp32_eager_s"] / f["median_s"])
    rc, f = cli("harness/profile.py", "--out", "profiles/toy.md", "--trace", "profiles/toy.json")
    assert rc == 0 and (ws / "profiles" / "toy.md").is_file() and (ws / "profiles" / "toy.json").is_file()
    (ws / "broken.py").write_text("def build_decoder(m, x):\n    raise ValueError('nope')\n")
    rc, f = cli("harness/bench.py", "--candidate", "broken.py")
    assert rc == 1 and "nope" in f["reason"]
    rc, f = cli("harness/bench.py", "--preset", "huge")
    assert rc == 2 and "unknown preset" in f["reason"]
