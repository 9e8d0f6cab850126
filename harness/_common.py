"""Shared pieces of the frozen evaluator: paths, goals, the target adapter, asset files,
the comparison, hashes, environment facts and the candidate loader.

Everything target-specific comes through goals.json and the adapter module it names; nothing
here knows what model is being optimized.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import linecache
import os
import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# harness/profile.py shares its name with the standard library's `profile`, which cProfile (and so
# torch._dynamo) imports. A script run as `python harness/x.py` has harness/ first on sys.path:
# move it last, so the standard module wins and `import _common` still works.
_HERE = Path(__file__).resolve().parent
_mine = [p for p in sys.path if p and Path(p).resolve() == _HERE]
sys.path[:] = [p for p in sys.path if p not in _mine] + _mine

# Tests and retargeted copies point the harness at another goals file with this variable.
GOALS_ENV = "AUTO_OPTIM_GOALS"
FROZEN_PATHS = ("harness", "model", "goals.json")


class SetupError(Exception):
    """The setup is broken (missing assets, bad goals): exit code 2, not a candidate failure."""


def goals_path() -> Path:
    return Path(os.environ.get(GOALS_ENV, REPO / "goals.json")).resolve()


def load_goals() -> dict[str, Any]:
    path = goals_path()
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SetupError(f"goals file not found: {path}") from None
    except json.JSONDecodeError as e:
        raise SetupError(f"goals file {path} is not valid JSON: {e}") from None


def root() -> Path:
    """The directory the goals file lives in: candidate, assets and records are relative to it."""
    return goals_path().parent


def load_adapter(goals: dict[str, Any]) -> ModuleType:
    """The target's adapter module (load_model, make_input, reference, output_shape, flops, ...)."""
    if str(root()) not in sys.path:
        sys.path.insert(0, str(root()))
    return importlib.import_module(goals["adapter"])


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_preset(goals: dict[str, Any], name: str | None, device: str) -> str:
    """`full` on CUDA and `tiny` on CPU unless asked; an unknown name is a setup error."""
    name = name or ("full" if device == "cuda" else "tiny")
    if name not in goals["presets"]:
        raise SetupError(f"unknown preset {name!r}; goals.json has {sorted(goals['presets'])}")
    return name


def assets_dir() -> Path:
    return root() / "assets"


def input_path(preset: str) -> Path:
    return assets_dir() / f"input_{preset}.pt"


def reference_path(preset: str) -> Path:
    return assets_dir() / f"reference_{preset}.pt"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_tensor(t: torch.Tensor) -> str:
    return sha256_bytes(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())


def frozen_hash() -> str:
    """One hash over every file under the frozen paths (harness/, model/, goals.json)."""
    h = hashlib.sha256()
    base = root()
    for rel in FROZEN_PATHS:
        p = base / rel
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                h.update(str(f.relative_to(base)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def save_tensor_atomic(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_asset(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise SetupError(f"{what} not found: {path} (run harness/make_latent.py / make_reference.py)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same setup error
        raise SetupError(f"{what} {path} is unreadable: {type(e).__name__}: {e}") from None


def compare(out: torch.Tensor, ref: torch.Tensor, gate: dict[str, Any]) -> dict[str, Any]:
    """PSNR (over the gate's value range) and max-abs of `out` against `ref`, and the verdict."""
    facts: dict[str, Any] = {"psnr_db": None, "max_abs": None, "passed": False, "reason": ""}
    if not isinstance(out, torch.Tensor):
        facts["reason"] = f"output is {type(out).__name__}, not a tensor"
        return facts
    if tuple(out.shape) != tuple(ref.shape):
        facts["reason"] = f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
        return facts
    if out.dtype != ref.dtype:
        facts["reason"] = f"dtype {out.dtype} != reference {ref.dtype}"
        return facts
    out64 = out.detach().to("cpu", torch.float64)
    if not torch.isfinite(out64).all():
        facts["reason"] = "output has NaN or Inf"
        return facts
    diff = out64 - ref.to(torch.float64)
    lo, hi = gate["value_range"]
    mse = float((diff**2).mean())
    facts["max_abs"] = float(diff.abs().max())
    facts["psnr_db"] = float("inf") if mse == 0 else float(10 * torch.log10(torch.tensor((hi - lo) ** 2 / mse)))
    if facts["psnr_db"] < gate["min_psnr_db"]:
        facts["reason"] = f"PSNR {facts['psnr_db']:.2f} dB < {gate['min_psnr_db']} dB"
    elif facts["max_abs"] > gate["max_abs"]:
        facts["reason"] = f"max abs diff {facts['max_abs']:.4f} > {gate['max_abs']}"
    else:
        facts["passed"] = True
    return facts


def env_info(device: str) -> dict[str, Any]:
    """GPU name and versions, printed beside every number."""
    info = {
        "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda if device == "cuda" else None,
        "cudnn": torch.backends.cudnn.version() if device == "cuda" else None,
        "python": platform.python_version(),
    }
    return info


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class FileGuard:
    """Refuses any open() of the given files once armed, through a Python audit hook.

    Audit hooks cannot be removed, so a candidate cannot turn the guard off; the harness reads
    the files it needs before importing the candidate.
    """

    _installed: "FileGuard | None" = None

    def __init__(self) -> None:
        self.blocked: set[str] = set()

    @classmethod
    def get(cls) -> "FileGuard":
        if cls._installed is None:
            cls._installed = FileGuard()
            sys.addaudithook(cls._installed._hook)
        return cls._installed

    def block(self, *paths: Path) -> None:
        self.blocked.update(os.path.realpath(p) for p in paths)

    def _hook(self, event: str, args: tuple) -> None:
        if event == "open" and self.blocked and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if os.path.realpath(path) in self.blocked:
                raise PermissionError(f"candidate may not read {path}")


def load_candidate(path: Path, goals: dict[str, Any]):
    """Import the candidate file under a fresh module name: (its build function, the sha256 of
    the exact source that was executed). run_experiment compares that hash with the source it
    records, so a file edited while it is being measured cannot be recorded under the wrong code."""
    if not path.is_file():
        raise SetupError(f"candidate file not found: {path}")
    source = path.read_bytes()
    # Code that reads its own source (Triton's @jit does, via inspect) must see these bytes too,
    # not the file as it is later: pin them in the line cache (no mtime, so never re-checked).
    linecache.cache[str(path)] = (len(source), None, source.decode().splitlines(True), str(path))
    name = f"_candidate_{sha256_bytes(str(path).encode())[:8]}_{os.getpid()}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)  # the bytes hashed, not a re-read
    build = getattr(module, goals["build_fn"], None)
    if build is None:
        raise AttributeError(f"{path.name} defines no {goals['build_fn']}()")
    return build, sha256_bytes(source)


def emit(human: list[str], facts: dict[str, Any]) -> None:
    """The output format of every tool: lines for a person, `key: value` lines, one JSON line."""
    for line in human:
        print(line)
    for key, value in facts.items():
        if not isinstance(value, (dict, list)):
            print(f"{key}: {value}")
    print(json.dumps(facts, default=str))
    sys.stdout.flush()
