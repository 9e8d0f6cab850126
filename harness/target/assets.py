"""The target's asset files: the benchmark input, its strict-fp32 reference and the pool of fresh
inputs with their references (assets/, made by harness/cli/prepare.py), each checked when loaded
against the model code and weights it was made with; what the worker may never read; and
strict_fp32, the numerics every reference is computed in (here and, where the reference follows
the output, in the session after each call).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness._common import root
from harness.hashing import sha256_tensor
from harness.errors import Refused


def assets_dir() -> Path:
    return root() / "assets"


def input_path(preset: str) -> Path:
    return assets_dir() / f"input_{preset}.pt"


def reference_path(preset: str) -> Path:
    return assets_dir() / f"reference_{preset}.pt"


def pool_dir(preset: str) -> Path:
    """The pool of fresh inputs with their references: one file per input, made once per machine."""
    return assets_dir() / f"pool_{preset}"


def secret_paths(goals: dict[str, Any]) -> list[Path]:
    """What the candidate's worker may never read: every preset's input, reference and pool."""
    return [p for preset in goals["presets"] for p in (input_path(preset), reference_path(preset), pool_dir(preset))]


def save_tensor_atomic(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


REMAKE = "run auto-optim prepare (it remakes what is missing, damaged or stale)"


def load_asset(path: Path, what: str, mmap: bool = False) -> dict[str, Any]:
    """An asset file as a dict (mmap: its tensors mapped, not read: a cheap check of a large one)."""
    if not path.is_file():
        raise Refused(f"{what} not found: {path}; {REMAKE}")
    try:
        asset = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same setup error
        raise Refused(f"{what} {path} is damaged ({type(e).__name__}); {REMAKE}") from None
    if not isinstance(asset, dict):
        raise Refused(f"{what} {path} is not an asset this harness made; {REMAKE}")
    return asset


def model_code_sha256(adapter: ModuleType) -> str:
    """Hash of the model code: every file of the package that holds the adapter (model/)."""
    base = Path(adapter.__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(base.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            h.update(str(f.relative_to(base)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def load_input_asset(goals: dict[str, Any], adapter: ModuleType, preset: str) -> torch.Tensor:
    """The preset's benchmark input, checked for shape and dtype (the adapter's make_input's)."""
    path = input_path(preset)
    x = load_asset(path, "input").get("input")
    if not isinstance(x, torch.Tensor):
        raise Refused(f"{path} holds no 'input' tensor; {REMAKE}")
    shape = list(goals["presets"][preset]["input_shape"])
    if list(x.shape) != shape:
        raise Refused(f"{path}: input shape {list(x.shape)}, preset {preset} needs {shape}; {REMAKE}")
    dtype = adapter.make_input(shape, 0, "cpu").dtype
    if x.dtype != dtype:
        raise Refused(f"{path}: input dtype {x.dtype}, the target's inputs are {dtype}; {REMAKE}")
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise Refused(f"{path}: input has NaN or Inf; {REMAKE}")
    return x


def _check_made_for(meta: dict[str, Any], adapter: ModuleType, path: Path) -> None:
    """A reference is only valid for the weights and model code it was made with."""
    if meta.get("model_sha256") != model_code_sha256(adapter):
        raise Refused(f"model code changed since {path.name} was made; {REMAKE}")
    if meta.get("weights_id") != adapter.weights_id():
        raise Refused(f"weights changed since {path.name} was made; {REMAKE}")


def load_reference_asset(goals: dict[str, Any], adapter: ModuleType, preset: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The benchmark input and its strict-fp32 reference, checked against each other and against
    the model code and weights (Refused when stale)."""
    x = load_input_asset(goals, adapter, preset)
    path = reference_path(preset)
    asset = load_asset(path, "reference")
    ref, meta = asset.get("output"), asset.get("meta") or {}
    if not isinstance(ref, torch.Tensor):
        raise Refused(f"{path} holds no 'output' tensor; {REMAKE}")
    if meta.get("input_sha256") != sha256_tensor(x):
        raise Refused(f"{path.name} was made from another input; {REMAKE}")
    _check_made_for(meta, adapter, path)
    return x, ref, meta


def reference_follows_output(adapter: ModuleType) -> bool:
    """Does the target check each output against a reference computed from that output? An
    adapter says so by having `reference_for_output(model, x, out) -> ref`: the frozen model's
    answer along the path the output itself took (an LLM's greedy tokens, read from its logits).
    No stored reference can check such an output, so the harness loads the frozen model and
    computes the reference after every call; its pool inputs need none."""
    return callable(getattr(adapter, "reference_for_output", None))


def _pool_files(preset: str) -> list[Path]:
    folder = pool_dir(preset)
    files = sorted(folder.glob("*.pt")) if folder.is_dir() else []
    if not files:
        raise Refused(f"no pool of fresh inputs in {folder}; {REMAKE}")
    return files


def _pool_asset(f: Path, adapter: ModuleType, follows: bool, mmap: bool = False) -> dict[str, Any]:
    """One pool file, checked: an input, its reference (unless it follows the output), made for
    these weights and this model code."""
    asset = load_asset(f, "pool input", mmap)
    _check_made_for(asset.get("meta") or {}, adapter, f)
    if not isinstance(asset.get("input"), torch.Tensor):
        raise Refused(f"{f} holds no input; {REMAKE}")
    if asset.get("output") is None and not follows:
        raise Refused(f"{f} holds no reference; {REMAKE}")
    return asset


def check_pool(goals: dict[str, Any], adapter: ModuleType, preset: str) -> None:
    """Refused when the pool is missing, short of goals.json's size, damaged or stale (its
    files mapped, not read: cheap at the full preset too)."""
    files = _pool_files(preset)
    want = int(goals.get("pool", {}).get("size", 8))
    if len(files) < want:
        raise Refused(f"{pool_dir(preset)} holds {len(files)} inputs, goals.json's pool {want}; {REMAKE}")
    for f in files:
        _pool_asset(f, adapter, reference_follows_output(adapter), mmap=True)


def load_pool(goals: dict[str, Any], adapter: ModuleType, preset: str, device: str) -> list[dict[str, Any]]:
    """The pool of fresh inputs: [{"input", "output" (its reference, None where the reference
    follows the output), "strict"}] on `device`."""
    follows = reference_follows_output(adapter)
    pool = []
    for f in _pool_files(preset):
        asset = _pool_asset(f, adapter, follows)
        pool.append({"input": asset["input"].to(device),
                     "output": None if follows else asset["output"].to(device),
                     "strict": follows or (asset.get("meta") or {}).get("precision") == "strict-fp32"})
    return pool


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """TF32 off and deterministic algorithms on, restoring the previous settings afterwards (the
    environment too: a worker started later by this process must not inherit the cuBLAS setting)."""
    set_env = "CUBLAS_WORKSPACE_CONFIG" not in os.environ
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
        if set_env:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
