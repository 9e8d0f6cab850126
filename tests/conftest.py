"""Shared fixtures: one loaded model per session and a throwaway workspace with tiny assets.

`workspace`: a temp dir holding a copy of goals.json and optimize.py, symlinks to the repo's
model/ and harness/, the tiny seeded latent and its strict-fp32 reference, with AUTO_OPTIM_GOALS
pointing at it, so no test touches the real assets/, results.tsv or optimize.py.
`vae`: the frozen model, loaded once (synthetic weights take ~16 s to make on CPU).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness import _common as C  # noqa: E402


@pytest.fixture(scope="session")
def vae() -> torch.nn.Module:
    """The pristine frozen model on CPU. Tests must not mutate it (candidates get it shared)."""
    adapter = C.load_adapter(C.load_goals())
    return adapter.load_model("cpu")


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory, vae: torch.nn.Module) -> Path:
    from harness import make_latent, make_reference

    ws = tmp_path_factory.mktemp("workspace")
    for name in ("goals.json", "optimize.py"):
        shutil.copy2(REPO / name, ws / name)
    for name in ("model", "harness"):
        (ws / name).symlink_to(REPO / name, target_is_directory=True)
    saved = os.environ.get(C.GOALS_ENV)
    os.environ[C.GOALS_ENV] = str(ws / "goals.json")
    make_latent.run("tiny", mode="seeded", device="cpu")
    make_reference.run("tiny", device="cpu", model=vae)
    yield ws
    if saved is None:
        os.environ.pop(C.GOALS_ENV, None)
    else:
        os.environ[C.GOALS_ENV] = saved
