"""Scaffold a new target: the few files that retarget the harness, as a working starting point.

Usage (from the repository root; DIR: targets/NAME):
    auto-optim new-target NAME [--dir DIR]
    python -P -m harness.cli.new_target NAME [--dir DIR]        # the same, as a module

Writes DIR/ (refused if it exists), every file the harness and the hooks expect a target to hold:
    goals.json          the target: adapter, presets, metric, gate, pool, noise threshold, stop rule
    optimize.py         the candidate the agent edits: build_decoder(model, example_input) -> (forward_fn, info)
    NAME_model/         the frozen model and its adapter (target.py: the functions the harness calls,
                        harness/target/adapter.py's Adapter, checked when it loads)
    candidates/         the variants of a wave (the agent's)
    results.tsv         the ledger, its header only
    records/ profiles/ quality/ progress/   what the harness writes (each with a README.md, for git)
    runs/               the harness's scratch (ignored)
    PROGRESS.md         the agent's journal
    README.md           what to replace, and the commands below
    .gitignore          its assets/ and runs/
and, for a folder under this checkout's targets/, writes .claude/settings.json again
(agent/policy.py): the new target's goals, records, adapter and configuration are protected
from the agent with no hand edit (restart Claude Code to load it).

The stand-in model runs a small MLP position by position (as a streaming decoder does), so the
scaffold works end to end at once: prepare makes its seeded input, reference and pool; the first
run records its fp32 eager baseline and measures optimize.py against it. Replace the model, its
input and its gate with yours (README.md there says where), commit, and run:
    git add DIR && git commit -m "target NAME"
    auto-optim prepare --target NAME
    auto-optim run --target NAME --desc "first run"
(pyproject.toml's [tool.auto-optim] target = "NAME" makes it the default, the one the agent's door serves.)
Exit 0 written, 2 refused (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from harness import console, _common
from harness.errors import Refused
from harness.ledger.rows import HEADER

GOALS = {
    "target": "{name}",
    "description": "REPLACE: what is made faster (the stand-in: a small MLP run position by position)",
    "adapter": "{package}.target",
    "candidate": "optimize.py",
    "build_fn": "build_decoder",
    "input_source": "seeded",
    "metric": {"name": "median_s", "unit": "s", "better": "lower",
               "text": "median seconds per call over the timed calls, read by the harness"},
    "presets": {
        "full": {"input_shape": [1, 65536, 16], "timed_runs": 6, "warmup_runs": 1, "note": "REPLACE: the size to optimize"},
        "tiny": {"input_shape": [1, 4096, 16], "timed_runs": 6, "warmup_runs": 1, "note": "a CPU checks the logic on it"},
    },
    "gate": {"max_abs": 1e-4, "quality_name": "max abs diff", "quality_better": "lower",
             "rationale": "REPLACE: calibrate it: what a harmless change (bf16, another summation order) reaches and "
                          "what a wrong one (a skipped layer) does"},
    "pool": {"size": 8, "strict": 8, "store_dtype": "float32", "reference": "strict fp32 (cheap for a small model)"},
    "noise_threshold": 0.01,
    "stop_rule": {"plateau_attempts": 8, "gpu_busy_min": 0.99, "max_outside": 0.03, "within_floor": 0.10,
                  "text": "8 attempts without a better row, the GPU busy >= 99% of the call with at most 3% of kernel "
                          "time outside the largest class, and the median within 10% of the floor"},
    "floor": {"work": "flops", "note": "executed FLOPs at the probed peak (harness/decide/floor.py)"},
}

ADAPTER = '''"""The adapter of target {name}: the functions the harness calls (their one definition:
harness/target/adapter.py). REPLACE the stand-in model, its input and its gate with yours; keep the names.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

CHANNELS, HIDDEN = 16, 64


class Model(nn.Module):
    """REPLACE: the stand-in, [B, T, C] -> [B, T, C], one position at a time (a streaming model's
    loop): an MLP over channels with a residual, squashed to [-1, 1]."""

    def __init__(self, channels: int = CHANNELS, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(channels, hidden), nn.Tanh(), nn.Linear(hidden, channels))

    def step(self, v: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mlp(v) + v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.step(x[:, t]) for t in range(x.shape[1])], dim=1)


def load_model(device: str | torch.device = "cpu") -> Model:
    """The frozen model in fp32, eval mode, no gradients; seeded weights (REPLACE: load yours)."""
    torch.manual_seed(0)
    return Model().to(device).eval().requires_grad_(False)


def weights_kind() -> str:
    return "synthetic"


def weights_id() -> str:
    """Names the weights the references are made with: here the code that seeds them."""
    return "{name}-" + hashlib.sha256(open(__file__, "rb").read()).hexdigest()[:16]


def make_input(shape: list[int], seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """A seeded input of a preset's input_shape (REPLACE: token ids, a latent, an image ...)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device)


def reference(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x)


def output_shape(shape: list[int]) -> list[int]:
    return list(shape)


def compare(out: torch.Tensor, ref: torch.Tensor, gate: dict) -> dict:
    """The gate: the largest absolute difference (REPLACE with the measure your outputs need)."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        return {{"passed": False, "reason": "wrong type, shape or dtype", "quality": None, "max_abs": None}}
    if not torch.isfinite(out).all():
        return {{"passed": False, "reason": "output has NaN or Inf", "quality": None, "max_abs": None}}
    worst = float((out - ref.to(out.dtype)).abs().max())
    ok = worst <= gate["max_abs"]
    return {{"passed": ok, "reason": "" if ok else f"max abs diff {{worst:.4g}} > {{gate['max_abs']}}",
            "quality": worst, "max_abs": worst}}


def flops(shape: list[int]) -> float:
    """The model's nominal FLOPs for one call (optional: the floor, harness/decide/floor.py): two
    matrix-vector products a position. A formula, not a count: counting runs the model."""
    batch, positions, _ = shape
    return 2.0 * batch * positions * 2 * CHANNELS * HIDDEN
'''

OPTIMIZE = '''"""Target {name}'s editable file: build_decoder(model, example_input) -> (forward_fn, info).
The frozen model as it is: the first run measures it against its fp32 eager baseline."""


def build_decoder(model, example_input):
    def forward_fn(x):
        return model(x)

    return forward_fn, {{"dtype": "float32", "compile": "none"}}
'''

README = '''# Target {name}

Made by `auto-optim new-target {name}`: a working stand-in to replace.

1. **The model and its adapter**: `{package}/target.py`. Replace `Model` and `load_model` with your
   frozen model, `make_input` with your input (token ids, a latent, ...), `compare` with your
   gate; keep the function names (the harness checks them when it loads the adapter).
2. **goals.json**: the presets' input shapes, the gate's bounds and rationale (calibrate them:
   what harmless changes reach, what wrong ones do), the metric.
3. **optimize.py**: the baseline candidate, the frozen model called plainly.

Then, from the repository root (add `--rebaseline` to the run if the stand-in already has a baseline:
the adapter and goals.json are frozen, and a run refuses to compare across a change to them):

```bash
git add {dir} && git commit -m "target {name}"    # with .claude/settings.json where new-target rewrote it
auto-optim prepare --target {name} && auto-optim run --target {name} --desc "first run"
```

To let the agent work on it, make it the default: `[tool.auto-optim] target = "{name}"` in pyproject.toml.
'''


# The folders the harness writes in (and candidates/, the agent's), each with a README.md so git keeps it.
FOLDERS = {"candidates": "The variants of a wave: the agent writes them here (harness/cli/wave.py).",
           "records": "One signed record an experiment (harness/ledger/store.py); results.tsv is made from them.",
           "profiles": "Profiles of the candidates (harness/measure/profile.py).",
           "quality": "Quality pictures of the rows (harness/ledger/plots.py).",
           "progress": "Progress plots, one a preset and machine (harness/ledger/plots.py)."}


def package_name(name: str) -> str:
    return re.sub(r"\W", "_", name).strip("_").lower() + "_model"


def scaffold(name: str, folder: Path) -> list[Path]:
    """Write the target's files into `folder` (which must not exist); the paths written."""
    if not re.fullmatch(r"[A-Za-z][\w-]*", name):
        raise Refused(f"target name {name!r}: letters, digits, - and _, starting with a letter")
    if folder.exists():
        raise Refused(f"{folder} exists; pick another name or --dir (nothing is written over)")
    package = package_name(name)
    shown = os.path.relpath(folder, _common.REPO) if Path(os.path.abspath(folder)).is_relative_to(_common.REPO) \
        else folder.as_posix()
    goals = json.loads(json.dumps(GOALS).replace("{name}", name).replace("{package}", package))
    files = {"goals.json": json.dumps(goals, indent=1) + "\n", "optimize.py": OPTIMIZE.format(name=name),
             f"{package}/__init__.py": f'"""Target {name}\'s frozen model package (its adapter: {package}.target)."""\n',
             f"{package}/target.py": ADAPTER.format(name=name),
             "README.md": README.format(name=name, package=package, dir=shown),
             ".gitignore": "assets/\nruns/\n__pycache__/\n",
             "results.tsv": HEADER,
             "PROGRESS.md": f"# Target {name}: the journal\n\nWhat was tried, what was measured, what comes next.\n",
             **{f"{d}/README.md": f"{what}\n" for d, what in FOLDERS.items()}}
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (folder / "runs").mkdir()  # ignored: the harness's scratch
    return [folder / rel for rel in files]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name")
    p.add_argument("--dir", type=Path, help="default: targets/NAME (from where you run it: the repository root)")
    a = p.parse_args(argv)
    # The checkout's targets/, wherever it is run from (as every verb finds a target), shown from here.
    folder = a.dir or Path(os.path.relpath(_common.REPO / "targets" / a.name))
    try:
        written = scaffold(a.name, folder)
    except Refused as e:
        print(f"{prog or 'new_target'}: {e}", file=sys.stderr)
        return 2
    goals = (folder / "goals.json").as_posix()
    settings = ""
    if Path(os.path.abspath(folder)).parent == _common.REPO / "targets" and (_common.REPO / ".claude").is_dir():
        from harness.cli.settings import write_settings

        write_settings()  # the agent's rules name each target's files: commit them with the target
        settings = " " + os.path.relpath(_common.REPO / ".claude" / "settings.json")
    console.emit([f"target {a.name} scaffolded in {folder}: " + ", ".join(p.relative_to(folder).as_posix() for p in written),
            "next: these run the stand-in as it is; after replacing it (README.md there), commit, prepare again and",
            "run with --rebaseline (the adapter and goals.json are frozen)",
            f"  git add {folder.as_posix()}{settings} && git commit -m \"target {a.name}\"",
            f"  auto-optim prepare --target {a.name}",
            f"  auto-optim run --target {a.name} --desc \"first run\""],
           {"target": a.name, "dir": str(folder), "goals": goals})
    return 0


if __name__ == "__main__":
    sys.exit(main())
