"""The gate (harness/cli/verify.py) on the VAE's tiny preset: calibration, exit codes, stale assets, and
the quality strip's frame. The cheaters run in test_cheaters.py (on the toy target: cheaper).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import python_c, tool, use
from harness import _common as C
from harness.cli import verify

HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "candidates"
REPO = HERE.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder


def run_verify(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, C.GOALS_ENV: str(ws / "goals.json")}
    return subprocess.run([*tool("harness.cli.verify"), "--preset", "tiny",
                           "--device", "cpu", *args], env=env, capture_output=True, text=True, timeout=600)


def verify_here(ws: Path, capsys: pytest.CaptureFixture, *args: str) -> subprocess.CompletedProcess:
    """run_verify as verify.main in this process (no interpreter start): the same exit code and
    output, for the setup errors it reports before any worker starts. The command line's own
    one-line setup error runs in test_cli_missing_assets_exit_2."""
    with use(ws):
        code = verify.main(["--preset", "tiny", "--device", "cpu", *args])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["verify.main"], code, out.out, out.err)


CALIBRATION = r"""
import json, sys
from harness.measure.session import Session
for path in sys.argv[1:]:
    with Session(path, "tiny", "cpu") as s:
        f = s.measure(calls=2)
    print(json.dumps({k: f[k] for k in ("passed", "reason", "quality", "fresh_quality", "checked", "sandbox")}))
"""


def test_calibration(workspace: Path) -> None:
    """A plain bf16 eager decode passes the VAE's gate; coarser numerics fail it. One test, so the
    decodes share the suite's time. Each candidate is checked as verify checks it (a Session), on
    two calls instead of verify's three: the benchmark input and one fresh input (the pool's
    strict-fp32 one), each a full-width decode (a bf16 one costs ~15 CPU s); a failing candidate
    fails at its first call either way. In one harness process run from the workspace (its own
    copy of harness/), whose workers load the weights cache the workspace holds."""
    names = ("bf16_eager", "fp8_activations", "skip_block")
    r = subprocess.run([*python_c(CALIBRATION, workspace), *(str(CANDIDATES / f"{n}.py") for n in names)],
                       cwd=workspace, env={**os.environ, C.GOALS_ENV: str(workspace / "goals.json")},
                       capture_output=True, text=True, timeout=600)
    got = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and len(got) == 3, r.stdout[-2000:] + r.stderr[-3000:]
    facts = got[0]
    assert facts["sandbox"].startswith("bwrap"), facts["sandbox"]
    assert facts["passed"], facts["reason"]
    assert [c["input"] for c in facts["checked"]].count("benchmark input") == 1 and len(facts["checked"]) == 2
    assert 45 < facts["quality"] < 70 and 45 < facts["fresh_quality"] < 70
    for name, facts in zip(names[1:], got[1:]):
        assert not facts["passed"] and "PSNR" in facts["reason"], (name, facts["reason"])


def test_cli_shipped_optimize_passes(narrow_workspace: Path) -> None:
    """verify's command line on the shipped optimize.py, sandboxed, against the VAE's gate. On the
    narrow VAE (tests/narrow_vae): its CPU path copies every conv weight, which beside the
    full-width model would be 5 GB in the worker."""
    r = run_verify(narrow_workspace)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "passed: True" in r.stdout and "sandbox: bwrap" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("{")


def test_cli_missing_assets_exit_2(tmp_path: Path) -> None:
    shutil.copy2(VAE / "goals.json", tmp_path / "goals.json")
    shutil.copy2(VAE / "optimize.py", tmp_path / "optimize.py")
    (tmp_path / "model").symlink_to(VAE / "model", target_is_directory=True)
    r = run_verify(tmp_path)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "auto-optim prepare" in r.stderr


def test_damaged_assets_say_how_to_remake_them(toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(toy, ws, symlinks=True)
    (ws / "assets" / "input_tiny.pt").write_bytes(b"garbage, not a torch file")
    r = verify_here(ws, capsys)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "damaged" in r.stderr and "auto-optim prepare" in r.stderr and "weights_only" not in r.stderr


def test_stale_reference_is_setup_error(toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(toy, ws, symlinks=True)
    ref = torch.load(ws / "assets" / "reference_tiny.pt", weights_only=True)
    ref["meta"]["model_sha256"] = "0" * 64
    torch.save(ref, ws / "assets" / "reference_tiny.pt")
    r = verify_here(ws, capsys)
    assert r.returncode == 2 and "auto-optim prepare" in r.stderr, r.stderr  # which remakes a stale one


def test_worst_frame_picks_the_furthest_frame() -> None:
    """The quality strip shows the frame where the candidate is furthest from the reference."""
    from model import target

    ref = torch.linspace(-1, 1, 2 * 3 * 5 * 4 * 4).view(2, 3, 5, 4, 4)
    out = ref.clone()
    out[0, :, 3] += 0.1  # frame 3 of the first video is off by 0.1 everywhere
    out[0, :, 1] += 0.01
    gate = {"value_range": [-1.0, 1.0], "min_psnr_db": 45.0, "max_abs": 0.25}
    f = verify.worst_frame(target, out, ref, gate)
    assert (f["index"], f["count"]) == (3, 5)
    assert abs(f["quality"] - 10 * math.log10(4 / 0.01)) < 1e-6
    assert torch.equal(f["reference"], ref[0, :, 3]) and torch.allclose(f["candidate"], out[0, :, 3])
    assert verify.worst_frame(object(), out, ref, gate) is None  # adapter without `frames`


def test_a_failed_picture_keeps_the_pass(tmp_path: Path) -> None:
    class BrokenFrames:
        @staticmethod
        def frames(output: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("no pictures today")

    facts = {"passed": True}
    x = torch.zeros(1, 3, 2, 4, 4)
    verify.save_worst_frame(BrokenFrames(), x, x, {"value_range": [-1.0, 1.0]}, tmp_path / "f.pt", facts)
    assert facts["passed"] and "no pictures today" in facts["worst_frame_error"]
    assert not (tmp_path / "f.pt").exists()


def test_vae_gate_compares_in_chunks_on_any_device() -> None:
    """The VAE's compare: PSNR and max-abs exactly, a lower-precision reference accepted, NaN and
    wrong dtype refused."""
    from model import target

    gate = {"value_range": [-1.0, 1.0], "min_psnr_db": 45.0, "max_abs": 0.25}
    ref = torch.rand(1, 3, 5, 8, 8) * 2 - 1
    out = ref + 0.001
    res = target.compare(out, ref.half(), gate)
    assert res["passed"] and abs(res["max_abs"] - 0.001) < 1e-3
    assert abs(target.compare(out, ref, gate)["quality"] - 10 * math.log10(4 / 1e-6)) < 0.01
    out[0, 0, 0, 0, 0] = math.nan
    assert "NaN" in target.compare(out, ref, gate)["reason"]
    assert "dtype" in target.compare(ref.double(), ref, gate)["reason"]
