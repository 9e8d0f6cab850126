"""Make the frozen references for a preset: the benchmark input's strict-fp32 output, and a pool
of fresh inputs with theirs.

Usage:
    python -P -m harness.target.make_reference [--preset P] [--device cpu|cuda] [--force] [--only reference|pool]

Reads assets/input_<preset>.pt (make it with harness/target/make_latent.py) and writes
assets/reference_<preset>.pt = {"output": tensor, "meta": {precision, input_sha256, weights_id,
model_sha256, weights_kind, device, versions, seconds}}. Strict fp32 means TF32 off for matmul and
cuDNN and deterministic algorithms. The harness refuses a reference whose hashes no longer match
the input, the weights or the model code.

The pool (assets/pool_<preset>/NNN.pt, goals.json "pool"): `size` inputs drawn from os.urandom
seeds, each with its reference; the first `strict` of them in strict fp32, the others with
PyTorch's default settings (TF32 on CUDA: 7x cheaper, and far closer to strict than any gate
tolerance), stored as `store_dtype`. Every call of an experiment gets one of these or the
benchmark input, so no call repeats an input; the candidate's worker can read none of them.
Where the adapter has `reference_for_output` (the reference follows the output: _common's
reference_follows_output), the pool holds inputs only, since the session computes every call's
reference itself; the benchmark reference is still made (the frozen model's own output for that
input), because it pins the weights and model code and sizes the output buffer.

Exit 0 on success, 2 on any bad input (one line on stderr); existing files are never overwritten
without --force, and files are written atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from types import ModuleType
from typing import Any

import torch

from harness import console, hashing, machine, _common
from harness.target import assets
from harness.target.assets import strict_fp32
from harness.errors import Refused


def build_reference(adapter: ModuleType, model: torch.nn.Module, x: torch.Tensor, device: str,
                    preset: str, strict: bool = True, store_dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Run the adapter's reference (strict fp32, or PyTorch's defaults); returns the asset dict."""
    with strict_fp32() if strict else contextlib.nullcontext():
        xd = x.to(device)
        machine.sync(device)
        t0 = time.perf_counter()
        out = adapter.reference(model, xd)
        machine.sync(device)
        seconds = time.perf_counter() - t0
    out = out.detach().to("cpu").contiguous()
    if store_dtype is not None:
        out = out.to(store_dtype)
    env = machine.env_info(device)
    meta = {
        "precision": "strict-fp32" if strict else "fp32-defaults", "preset": preset,
        "input_sha256": hashing.sha256_tensor(x), "output_sha256": hashing.sha256_tensor(out),
        "weights_id": adapter.weights_id(), "model_sha256": assets.model_code_sha256(adapter),
        "weights_kind": adapter.weights_kind(), "device": device, "gpu": env["gpu"],
        "torch": str(env["torch"]), "cuda": env["cuda"], "cudnn": env["cudnn"],
        "seconds": round(seconds, 3), "shape": list(out.shape),
    }
    return {"output": out, "meta": meta}


def make_pool(goals: dict[str, Any], adapter: ModuleType, model: torch.nn.Module, preset: str,
              device: str) -> list[str]:
    """The preset's pool of fresh inputs and their references (goals.json "pool")."""
    spec = goals.get("pool", {})
    size, strict = int(spec.get("size", 8)), int(spec.get("strict", 1))
    store = getattr(torch, spec["store_dtype"]) if spec.get("store_dtype") else None
    shape = list(goals["presets"][preset]["input_shape"])
    folder = assets.pool_dir(preset)
    tmp = folder.with_name(f".{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    inputs_only = assets.reference_follows_output(adapter)
    for i in range(size):
        seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
        x = adapter.make_input(shape, seed, "cpu")
        if inputs_only:
            asset = {"meta": {"precision": "none: the session computes each call's reference", "preset": preset,
                              "input_sha256": hashing.sha256_tensor(x), "weights_id": adapter.weights_id(),
                              "model_sha256": assets.model_code_sha256(adapter), "weights_kind": adapter.weights_kind()}}
        else:
            asset = build_reference(adapter, model, x, device, preset, strict=i < strict, store_dtype=store)
        asset["input"] = x
        asset["meta"]["seed"] = seed
        torch.save(asset, tmp / f"{i:03d}.pt")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)  # the whole pool appears at once, or not at all
    return [str(folder)]


def run(preset: str | None = None, device: str | None = None, force: bool = False,
        model: torch.nn.Module | None = None, only: str | None = None) -> dict[str, Any]:
    """Make what is missing (everything, with force); `model` lets tests reuse a loaded model."""
    goals = _common.load_goals()
    adapter = _common.load_adapter(goals)
    device = device or machine.default_device()
    preset = _common.pick_preset(goals, preset, device)
    path, folder = assets.reference_path(preset), assets.pool_dir(preset)
    want_ref = only in (None, "reference") and (force or not path.exists())
    want_pool = only in (None, "pool") and (force or not folder.exists())
    if not (want_ref or want_pool):
        raise Refused(f"{path.name} and {folder.name}/ exist; pass --force to remake them")
    x = assets.load_input_asset(goals, adapter, preset)  # before the slow model load: bad input fails fast
    model = model if model is not None else adapter.load_model(device)
    facts: dict[str, Any] = {"preset": preset, "device": device, "path": str(path), "made": []}
    if want_ref:
        asset = build_reference(adapter, model, x, device, preset)
        assets.save_tensor_atomic(asset, path)
        facts.update(asset["meta"], made=[str(path)])
    if want_pool:
        t0 = time.perf_counter()
        facts["made"] += make_pool(goals, adapter, model, preset, device)
        facts["pool_seconds"] = round(time.perf_counter() - t0, 3)
    return facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name from goals.json (default: full on CUDA, tiny on CPU)")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    ap.add_argument("--force", action="store_true", help="remake what exists")
    ap.add_argument("--only", choices=["reference", "pool"], help="make only the benchmark reference, or only the pool")
    args = ap.parse_args(argv)
    try:
        facts = run(args.preset, args.device, args.force, only=args.only)
    except Refused as e:
        print(f"make_reference: {str(e).strip().splitlines()[0]}", file=sys.stderr)  # one line
        return 2
    console.emit([f"preset {facts['preset']} on {facts['device']}: made " + ", ".join(facts["made"])], facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
