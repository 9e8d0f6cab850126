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
import math
import os
import platform
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness import goals as goals_module
from harness.goals import GOALS_ENV, Goals  # noqa: F401 - GOALS_ENV: the tests' and tools' name for it

REPO = Path(__file__).resolve().parent.parent
# Appended, never first: the root is where the agent writes, and a file planted there (torch.py)
# must not be imported in place of an installed module by the harness, which runs unsandboxed.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))
# harness/profile.py shares its name with the standard library's `profile`, which cProfile (and so
# torch._dynamo) imports. A script run as `python harness/x.py` has harness/ first on sys.path:
# move it last, so the standard module wins and `import _common` still works.
_HERE = Path(__file__).resolve().parent
_mine = [p for p in sys.path if p and Path(p).resolve() == _HERE]
sys.path[:] = [p for p in sys.path if p not in _mine] + _mine

MIN_RUNS = 5  # timed calls at least: fewer give no meaningful median or spread


def seconds(text: str) -> float:
    """argparse's type for a time limit: a finite number of seconds above 0 (nan or inf would
    reach a socket's timeout and stop the harness with a traceback)."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


class SetupError(Exception):
    """The setup is broken (missing assets, bad goals): exit code 2, not a candidate failure."""


def goals_path() -> Path:
    return goals_module.path()


def load_goals() -> Goals:
    """goals.json as a Goals (harness/goals.py): read once per process, again only if it changes."""
    try:
        return goals_module.load()
    except goals_module.GoalsError as e:
        raise SetupError(str(e)) from None


def root() -> Path:
    """The directory the goals file lives in: candidate, assets and records are relative to it."""
    return goals_path().parent


# The adapter's contract: what every target's adapter gives the harness (README, "Retarget").
# Optional: flops and peak_probes (the floor), min_bytes (a "bytes" floor), frames (quality strips),
# reference_for_output (a reference that follows the output, such as an LLM's greedy path).
ADAPTER_CONTRACT = {
    "load_model": "load_model(device) -> the frozen model, fp32, eval mode",
    "weights_kind": "weights_kind() -> 'published' or 'synthetic'",
    "weights_id": "weights_id() -> a name for the weights the references are made with",
    "make_input": "make_input(shape, seed, device) -> a seeded input of a preset's input_shape",
    "reference": "reference(model, x) -> the frozen model's output for x",
    "output_shape": "output_shape(input_shape) -> the output's shape",
    "compare": "compare(out, ref, gate) -> {'passed', 'reason', 'quality', 'max_abs'} (the gate)",
}


def load_adapter(goals: dict[str, Any]) -> ModuleType:
    """The target's adapter module, checked against ADAPTER_CONTRACT: SetupError naming every
    missing piece at once."""
    if str(root()) not in sys.path:
        sys.path.append(str(root()))  # last, for the same reason as REPO above
    name = goals.get("adapter")
    if not isinstance(name, str) or not name:
        raise SetupError(f"{goals_path()} names no adapter module (\"adapter\": \"package.module\")")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):  # the adapter itself, not something it imports
            raise SetupError(f"adapter module {name} (goals.json \"adapter\") not found next to {goals_path()}") from None
        raise
    wanted = dict(ADAPTER_CONTRACT)
    if goals.get("floor", {}).get("work") == "bytes":
        wanted["min_bytes"] = "min_bytes(input_shape) -> the bytes a call cannot avoid moving (goals.json floor: bytes)"
    missing = [what for fn, what in wanted.items() if not callable(getattr(module, fn, None))]
    if missing:
        raise SetupError(f"adapter {name} ({module.__file__}) lacks {plural(len(missing), 'function')} the harness "
                         f"calls: " + "; ".join(missing))
    return module


def untrusted_python(prefix: str, executable: str, paths: list[str], projects: list[Path]) -> str | None:
    """Why this interpreter may not run the harness, or None: it, its environment (sys.prefix) or a
    site-packages it imports from lies inside a project folder, where the agent's sandboxed shell
    could write code that the harness, run outside that sandbox, would execute (a .pth file, a
    sitecustomize.py, a replaced bin/python). Paths as given, not resolved: a venv's bin/python is
    a symlink to a system interpreter, and the venv is what counts."""
    packages = [p for p in paths if p and Path(p).name in ("site-packages", "dist-packages")]
    for project in projects:
        for what, path in (("environment", prefix), ("interpreter", executable), *(("site-packages", p) for p in packages)):
            if Path(os.path.abspath(path)).is_relative_to(project):
                return (f"the Python {what} {path} is inside the project {project}, where the agent can write; "
                        "make the virtual environment outside it (README, Quickstart: python3 -m venv ~/.venvs/auto-optim)")
    return None


def _refuse_untrusted_python() -> None:
    """Every harness tool starts here (it imports this module): one line and exit 2 from an
    interpreter inside the project. Code planted there has run already by now (site runs first),
    which is why the Claude Code hooks start an absolute interpreter with -I and the guard refuses
    such an interpreter before it starts; this tells a person to move the environment."""
    main = Path(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    if main is None or not main.is_relative_to(_HERE):
        return  # imported by a test or a notebook, not a harness tool
    why = untrusted_python(sys.prefix, sys.executable, sys.path, sorted({REPO, root().resolve()}))
    if why:
        print(f"harness: refused: {why}", file=sys.stderr)
        sys.exit(2)


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


def pool_dir(preset: str) -> Path:
    """The pool of fresh inputs with their references: one file per input, made once per machine."""
    return assets_dir() / f"pool_{preset}"


def secret_paths(goals: dict[str, Any]) -> list[Path]:
    """What the candidate's worker may never read: every preset's input, reference and pool."""
    return [p for preset in goals["presets"] for p in (input_path(preset), reference_path(preset), pool_dir(preset))]


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


def frozen_files() -> dict[str, str]:
    """sha256 of every frozen file, by path: the harness that runs, the target's adapter package
    (wherever the goals file puts it) and the goals file itself."""
    goals = load_goals()
    adapter_dir = Path(load_adapter(goals).__file__).resolve().parent
    out = {}
    for top in (_HERE, adapter_dir, goals_path()):
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                out[_display(f)] = sha256_file(f)
    return out


def _display(path: Path) -> str:
    """A path as a person would name it: from the target's folder, else from the repository."""
    for base in (root().resolve(), REPO):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)


def frozen_hash(files: dict[str, str] | None = None) -> str:
    """One hash over the frozen files: every row carries the evaluator that produced it."""
    files = frozen_files() if files is None else files
    return sha256_bytes("\n".join(f"{k} {v}" for k, v in sorted(files.items())).encode())[:16]


def atomic_write(path: Path, data: bytes | str, exclusive: bool = False) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file. exclusive: a
    file that exists is never replaced (SetupError): records are written once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    if not exclusive:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)  # fails where the name exists, with no window between the check and the write
    except FileExistsError:
        raise SetupError(f"{path} exists; a record is never written over") from None
    finally:
        tmp.unlink()


def save_tensor_atomic(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


REMAKE = "run python harness/prepare.py (it remakes what is missing, damaged or stale)"


def load_asset(path: Path, what: str, mmap: bool = False) -> dict[str, Any]:
    """An asset file as a dict (mmap: its tensors mapped, not read: a cheap check of a large one)."""
    if not path.is_file():
        raise SetupError(f"{what} not found: {path}; {REMAKE}")
    try:
        asset = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same setup error
        raise SetupError(f"{what} {path} is damaged ({type(e).__name__}); {REMAKE}") from None
    if not isinstance(asset, dict):
        raise SetupError(f"{what} {path} is not an asset this harness made; {REMAKE}")
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
        raise SetupError(f"{path} holds no 'input' tensor; {REMAKE}")
    shape = list(goals["presets"][preset]["input_shape"])
    if list(x.shape) != shape:
        raise SetupError(f"{path}: input shape {list(x.shape)}, preset {preset} needs {shape}; {REMAKE}")
    dtype = adapter.make_input(shape, 0, "cpu").dtype
    if x.dtype != dtype:
        raise SetupError(f"{path}: input dtype {x.dtype}, the target's inputs are {dtype}; {REMAKE}")
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise SetupError(f"{path}: input has NaN or Inf; {REMAKE}")
    return x


def _check_made_for(meta: dict[str, Any], adapter: ModuleType, path: Path) -> None:
    """A reference is only valid for the weights and model code it was made with."""
    if meta.get("model_sha256") != model_code_sha256(adapter):
        raise SetupError(f"model code changed since {path.name} was made; {REMAKE}")
    if meta.get("weights_id") != adapter.weights_id():
        raise SetupError(f"weights changed since {path.name} was made; {REMAKE}")


def load_reference_asset(goals: dict[str, Any], adapter: ModuleType, preset: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The benchmark input and its strict-fp32 reference, checked against each other and against
    the model code and weights (SetupError when stale)."""
    x = load_input_asset(goals, adapter, preset)
    path = reference_path(preset)
    asset = load_asset(path, "reference")
    ref, meta = asset.get("output"), asset.get("meta") or {}
    if not isinstance(ref, torch.Tensor):
        raise SetupError(f"{path} holds no 'output' tensor; {REMAKE}")
    if meta.get("input_sha256") != sha256_tensor(x):
        raise SetupError(f"{path.name} was made from another input; {REMAKE}")
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
        raise SetupError(f"no pool of fresh inputs in {folder}; {REMAKE}")
    return files


def _pool_asset(f: Path, adapter: ModuleType, follows: bool, mmap: bool = False) -> dict[str, Any]:
    """One pool file, checked: an input, its reference (unless it follows the output), made for
    these weights and this model code."""
    asset = load_asset(f, "pool input", mmap)
    _check_made_for(asset.get("meta") or {}, adapter, f)
    if not isinstance(asset.get("input"), torch.Tensor):
        raise SetupError(f"{f} holds no input; {REMAKE}")
    if asset.get("output") is None and not follows:
        raise SetupError(f"{f} holds no reference; {REMAKE}")
    return asset


def check_pool(goals: dict[str, Any], adapter: ModuleType, preset: str) -> None:
    """SetupError when the pool is missing, short of goals.json's size, damaged or stale (its
    files mapped, not read: cheap at the full preset too)."""
    files = _pool_files(preset)
    want = int(goals.get("pool", {}).get("size", 8))
    if len(files) < want:
        raise SetupError(f"{pool_dir(preset)} holds {len(files)} inputs, goals.json's pool {want}; {REMAKE}")
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


def slug(text: str) -> str:
    """A machine's name as a file name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def plural(n: int, word: str) -> str:
    """'1 row', '2 rows'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def run_cli(main: Any, name: str, interrupted: str = "") -> int:
    """A tool's entry point: Ctrl-C ends it with one line and exit 130, not a traceback."""
    try:
        return main()
    except KeyboardInterrupt:
        print(f"{name}: interrupted (Ctrl-C)" + (f"; {interrupted}" if interrupted else ""), file=sys.stderr)
        return 130


def emit(human: list[str], facts: dict[str, Any]) -> None:
    """The output format of every tool: lines for a person, `key: value` lines, one JSON line."""
    for line in human:
        print(line)
    for key, value in facts.items():
        if value not in (None, "") and not isinstance(value, (dict, list)):  # a key with nothing to say is left out
            print(f"{key}: {value}")
    print(json.dumps(facts, default=str))
    sys.stdout.flush()


_refuse_untrusted_python()
