"""The harness is not specific to the VAE: a toy target (tests/toy_target: goals.json, an adapter
package, optimize.py) runs through the same tools with only AUTO_OPTIM_GOALS changed.

Here: make_latent, make_reference and verify through their CLIs. bench and profile run on the toy
in test_bench_profile.py, run_experiment's whole loop in test_run_experiment.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import torch
from conftest import tool

REPO = Path(__file__).resolve().parent.parent
TOY = Path(__file__).resolve().parent / "toy_target"


def test_toy_target_end_to_end(tmp_path: Path) -> None:
    ws = tmp_path / "toy"
    shutil.copytree(TOY, ws, ignore=shutil.ignore_patterns("__pycache__"))
    (ws / "harness").symlink_to(REPO / "harness")
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}

    def cli(*args: str) -> tuple[int, dict, str]:
        p = subprocess.run([*tool(args[0], ws), *args[1:]], cwd=ws, env=env, capture_output=True, text=True, timeout=300)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
        return p.returncode, json.loads(last) if last.startswith("{") else {}, p.stderr

    rc, f, err = cli("harness.target.make_latent", "--seeded", "--preset", "tiny", "--device", "cpu")
    assert rc == 0, err
    x = torch.load(ws / "assets" / "input_tiny.pt", weights_only=True)
    assert list(x["input"].shape) == [1, 4, 3, 8, 8] and x["meta"]["source"] == "seeded"
    rc, f, err = cli("harness.target.make_reference", "--preset", "tiny", "--device", "cpu")
    assert rc == 0, err
    ref = torch.load(ws / "assets" / "reference_tiny.pt", weights_only=True)
    assert ref["meta"]["precision"] == "strict-fp32" and ref["output"].shape == x["input"].shape

    rc, f, err = cli("harness.cli.verify", "--device", "cpu")
    assert rc == 0 and f["passed"] and f["preset"] == "tiny", err
    (ws / "bad.py").write_text("def build_decoder(model, x0):\n    return (lambda x: model(x) * 0.9), {}\n")
    rc, f, err = cli("harness.cli.verify", "--device", "cpu", "--candidate", "bad.py")
    assert rc == 1 and not f["passed"] and ("PSNR" in f["reason"] or "max abs" in f["reason"]), f


def test_toy_flops_formula_matches_torchs_counter() -> None:
    """The toy adapter gives its FLOPs by formula (cheap in every harness process); torch's
    counter, on the model itself, must agree for each preset's shape and an odd one."""
    from torch.utils.flop_counter import FlopCounterMode

    from toy_target.toymodel import target

    shapes = [p["input_shape"] for p in json.loads((TOY / "goals.json").read_text())["presets"].values()]
    for shape in [*shapes, [2, 4, 5, 3, 7]]:
        with torch.device("meta"):
            model, x = target.Toy(), torch.empty(*shape)
        counter = FlopCounterMode(display=False)
        with counter:
            model(x)
        assert target.flops(shape) == counter.get_total_flops() > 0, shape
