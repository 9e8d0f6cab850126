"""Make the frozen reference output for a preset: the pristine model's forward in strict fp32.

Usage:
    python harness/make_reference.py [--preset P] [--device cpu|cuda] [--force]

Reads assets/input_<preset>.pt (make it with harness/make_latent.py) and writes
assets/reference_<preset>.pt = {"output": fp32 tensor, "meta": {precision, input_sha256,
weights_sha256, model_sha256, weights_kind, device, versions, seconds}}. Strict fp32 means TF32
off for matmul and cuDNN and deterministic algorithms. verify.py refuses a reference whose
hashes no longer match the input, the weights or the model code.

Exit 0 on success, 2 on any bad input (one line on stderr); an existing reference is never
overwritten without --force, and files are written atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch  # noqa: E402

from harness import _common as C  # noqa: E402


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """TF32 off and deterministic algorithms on, restoring the previous settings afterwards."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(), torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
        torch.use_deterministic_algorithms(saved[2], warn_only=saved[3])
        torch.backends.cudnn.benchmark = saved[4]


def model_sha256(adapter: ModuleType) -> str:
    """Hash of the model code: every file of the package that holds the adapter (model/)."""
    base = Path(adapter.__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(base.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            h.update(str(f.relative_to(base)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def load_input(preset: str, goals: dict[str, Any]) -> torch.Tensor:
    """The preset's input tensor, checked for shape, dtype and its recorded hash."""
    asset = C.load_asset(C.input_path(preset), "input")
    x = asset.get("input") if isinstance(asset, dict) else None
    if not isinstance(x, torch.Tensor):
        raise C.SetupError(f"{C.input_path(preset)} holds no 'input' tensor")
    shape = list(goals["presets"][preset]["input_shape"])
    if x.dtype != torch.float32:
        raise C.SetupError(f"{C.input_path(preset)}: input dtype {x.dtype}, expected torch.float32")
    if list(x.shape) != shape:
        raise C.SetupError(f"{C.input_path(preset)}: input shape {list(x.shape)}, preset {preset} needs {shape}")
    recorded = (asset.get("meta") or {}).get("sha256")
    if recorded is not None and recorded != C.sha256_tensor(x):
        raise C.SetupError(f"{C.input_path(preset)}: tensor does not match its recorded sha256")
    if not torch.isfinite(x).all():
        raise C.SetupError(f"{C.input_path(preset)}: input has NaN or Inf")
    return x


def build_reference(adapter: ModuleType, model: torch.nn.Module, x: torch.Tensor, device: str,
                    preset: str) -> dict[str, Any]:
    """Run the adapter's reference in strict fp32; returns the asset dict (output + meta)."""
    with strict_fp32():
        xd = x.to(device)
        C.sync(device)
        t0 = time.perf_counter()
        out = adapter.reference(model, xd)
        C.sync(device)
        seconds = time.perf_counter() - t0
    out = out.detach().to("cpu", torch.float32).contiguous()
    env = C.env_info(device)
    meta = {
        "precision": "strict-fp32", "preset": preset,
        "input_sha256": C.sha256_tensor(x), "output_sha256": C.sha256_tensor(out),
        "weights_sha256": adapter.weights_sha256(model), "model_sha256": model_sha256(adapter),
        "weights_kind": adapter.weights_kind(), "device": device, "gpu": env["gpu"],
        "torch": str(env["torch"]), "cuda": env["cuda"], "cudnn": env["cudnn"],
        "seconds": round(seconds, 3), "shape": list(out.shape),
    }
    return {"output": out, "meta": meta}


def run(preset: str | None = None, device: str | None = None, force: bool = False,
        model: torch.nn.Module | None = None) -> dict[str, Any]:
    """Make and save the reference; `model` lets tests reuse an already loaded pristine model."""
    goals = C.load_goals()
    adapter = C.load_adapter(goals)
    device = device or C.default_device()
    preset = C.pick_preset(goals, preset, device)
    path = C.reference_path(preset)
    if path.exists() and not force:
        raise C.SetupError(f"{path} exists; pass --force to overwrite it")
    x = load_input(preset, goals)  # before the slow model load: bad input fails fast
    model = model if model is not None else adapter.load_model(device)
    asset = build_reference(adapter, model, x, device, preset)
    C.save_tensor_atomic(asset, path)
    return {**asset["meta"], "path": str(path)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name from goals.json (default: full on CUDA, tiny on CPU)")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    ap.add_argument("--force", action="store_true", help="overwrite an existing reference")
    args = ap.parse_args(argv)
    try:
        facts = run(args.preset, args.device, args.force)
    except C.SetupError as e:
        print(f"make_reference: {str(e).strip().splitlines()[0]}", file=sys.stderr)  # one line
        return 2
    C.emit([f"reference for preset {facts['preset']}: {facts['shape']} in {facts['seconds']} s "
            f"(strict fp32, {facts['device']}) -> {facts['path']}"], facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
