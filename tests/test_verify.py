"""The gate (harness/verify.py) on the tiny preset: calibration, cheaters, exit codes.

Most candidates run through the in-process `verify.check()` with the session model; those that
monkeypatch the model class, and the exit-code checks, run `python harness/verify.py` in a
subprocess so they cannot poison later tests.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import verify

HERE = Path(__file__).resolve().parent
CHEATERS = HERE / "cheaters"
CANDIDATES = HERE / "candidates"
REPO = HERE.parent


def run_verify(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}
    return subprocess.run([sys.executable, str(REPO / "harness" / "verify.py"), "--preset", "tiny",
                           "--device", "cpu", *args], env=env, capture_output=True, text=True, timeout=600)


def check(path: Path, vae: torch.nn.Module) -> dict:
    return verify.check(path, "tiny", "cpu", model=vae)


@pytest.mark.parametrize("name", ["reads_reference", "caches_first", "ignores_input", "zeros", "nan",
                                  "drift", "mutates_input", "wrong_shape"])
def test_cheater_rejected(workspace: Path, vae: torch.nn.Module, name: str) -> None:
    facts = check(CHEATERS / f"{name}.py", vae)
    assert not facts["passed"], f"{name} passed the gate"
    assert facts["reason"] and "\n" not in facts["reason"]


def test_bf16_eager_passes(workspace: Path, vae: torch.nn.Module) -> None:
    facts = check(CANDIDATES / "bf16_eager.py", vae)
    assert facts["passed"], facts["reason"]
    assert 45 < facts["psnr_db"] < 70 and 45 < facts["fresh_psnr_db"] < 70


@pytest.mark.parametrize("name", ["fp8_activations", "skip_block"])
def test_coarse_numerics_fail(workspace: Path, vae: torch.nn.Module, name: str) -> None:
    facts = check(CANDIDATES / f"{name}.py", vae)
    assert not facts["passed"] and "PSNR" in facts["reason"], facts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (side streams)")
def test_side_stream_rejected_on_gpu(workspace: Path) -> None:
    # Needs a tiny reference made on this machine's setup; the CPU one is valid for the same weights.
    facts = verify.check(CHEATERS / "side_stream.py", "tiny", "cuda")
    assert not facts["passed"], "side-stream cheater passed"


def test_cli_baseline_passes(workspace: Path) -> None:
    r = run_verify(workspace)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "passed: True" in r.stdout and r.stdout.strip().splitlines()[-1].startswith("{")


def test_cli_special_case_and_patch_rejected(workspace: Path) -> None:
    r = run_verify(workspace, "--candidate", str(CHEATERS / "special_case_patch.py"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "reason: fresh input" in r.stdout


def test_cli_missing_assets_exit_2(tmp_path: Path) -> None:
    shutil.copy2(REPO / "goals.json", tmp_path / "goals.json")
    shutil.copy2(REPO / "optimize.py", tmp_path / "optimize.py")
    (tmp_path / "model").symlink_to(REPO / "model", target_is_directory=True)
    r = run_verify(tmp_path)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "not found" in r.stderr


def test_stale_reference_is_setup_error(workspace: Path, vae: torch.nn.Module, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import _common as C

    ws = tmp_path
    C.FileGuard.get().blocked.clear()  # an earlier in-process check() left the assets guarded
    shutil.copy2(workspace / "goals.json", ws / "goals.json")
    (ws / "model").symlink_to(REPO / "model", target_is_directory=True)
    (ws / "assets").mkdir()
    shutil.copy2(workspace / "assets" / "input_tiny.pt", ws / "assets" / "input_tiny.pt")
    ref = torch.load(workspace / "assets" / "reference_tiny.pt", weights_only=True)
    ref["meta"]["model_sha256"] = "0" * 64
    torch.save(ref, ws / "assets" / "reference_tiny.pt")
    monkeypatch.setenv("AUTO_OPTIM_GOALS", str(ws / "goals.json"))
    with pytest.raises(C.SetupError, match="make_reference"):
        verify.check(REPO / "optimize.py", "tiny", "cpu", model=vae)


def test_worst_frame_picks_the_furthest_frame() -> None:
    """The quality strip shows the frame where the candidate is furthest from the reference."""
    from harness.verify import worst_frame
    from model import target

    ref = torch.linspace(-1, 1, 2 * 3 * 5 * 4 * 4).view(2, 3, 5, 4, 4)
    out = ref.clone()
    out[0, :, 3] += 0.1  # frame 3 of the first video is off by 0.1 everywhere
    out[0, :, 1] += 0.01
    gate = {"value_range": [-1.0, 1.0], "min_psnr_db": 45.0, "max_abs": 0.25}
    f = worst_frame(target, out, ref, gate)
    assert (f["index"], f["count"]) == (3, 5)
    assert abs(f["psnr_db"] - 10 * math.log10(4 / 0.01)) < 1e-6
    assert torch.equal(f["reference"], ref[0, :, 3]) and torch.allclose(f["candidate"], out[0, :, 3])
    assert worst_frame(object(), out, ref, gate) is None  # adapter without `frames`


def test_load_candidate_runs_and_pins_the_bytes_it_hashes(tmp_path: Path) -> None:
    """The sha256 it returns is of the code that ran, and code that reads its own source later
    (Triton's @jit, via inspect) sees those bytes, not a later edit of the file."""
    import inspect

    from harness import _common as C

    f = tmp_path / "cand.py"
    original = "def build_decoder(model, x):\n    return 'original'\n"
    f.write_text(original)
    build, sha = C.load_candidate(f, {"build_fn": "build_decoder"})
    f.write_text("def build_decoder(model, x):\n    return 'edited later'\n")
    assert sha == C.sha256_bytes(original.encode())
    assert build(None, None) == "original" and "'original'" in inspect.getsource(build)


def test_a_failed_picture_keeps_the_pass(tmp_path: Path) -> None:
    from harness.verify import save_worst_frame

    class BrokenFrames:
        @staticmethod
        def frames(output: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("no pictures today")

    facts = {"passed": True}
    x = torch.zeros(1, 3, 2, 4, 4)
    save_worst_frame(BrokenFrames(), x, x, {"value_range": [-1.0, 1.0]}, tmp_path / "f.pt", facts)
    assert facts["passed"] and "no pictures today" in facts["worst_frame_error"]
    assert not (tmp_path / "f.pt").exists()
