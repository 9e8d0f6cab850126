"""Shared fixtures: throwaway workspaces with tiny assets, so no test touches the real assets/,
results.tsv or optimize.py.

`toy`: the toy target (tests/toy_target: a conv + MLP with a max-abs gate), its tiny input, its
strict-fp32 reference and pool, harness/ linked in. Cheap: most harness tests run on it.
`workspace`: the same for the Wan 2.2 VAE (goals.json, optimize.py, model/ and harness/ linked),
for the tests that need the real model (calibration, the fast path). Made once per session;
`at_toy` and `at_workspace` point AUTO_OPTIM_GOALS at them for one test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
TOY = Path(__file__).resolve().parent / "toy_target"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness import _common as C  # noqa: E402


@contextlib.contextmanager
def use(ws: Path) -> Iterator[Path]:
    """Point the harness at a workspace's goals.json for the duration."""
    saved = os.environ.get(C.GOALS_ENV)
    os.environ[C.GOALS_ENV] = str(ws / "goals.json")
    try:
        yield ws
    finally:
        if saved is None:
            os.environ.pop(C.GOALS_ENV, None)
        else:
            os.environ[C.GOALS_ENV] = saved


def make_assets(ws: Path) -> None:
    """The tiny seeded input, its reference, the pool and the machine's peak probe (what prepare.py
    makes), in a fresh interpreter."""
    code = ("from harness import _common as C, floor, make_latent, make_reference; "
            "make_latent.run('tiny', mode='seeded', device='cpu'); make_reference.run('tiny', device='cpu'); "
            "floor.ensure_peak('cpu', C.load_adapter(C.load_goals()))")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=600,
                   env={**os.environ, C.GOALS_ENV: str(ws / "goals.json")})


def make_toy(dest: Path, copy_harness: bool = False, git: bool = False) -> Path:
    """A copy of the toy target with tiny assets; harness/ linked (or copied, for tests that let a
    candidate write into it unsandboxed); a git repository when asked."""
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__", "assets"))
    if copy_harness:
        shutil.copytree(REPO / "harness", dest / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        (dest / "harness").symlink_to(REPO / "harness", target_is_directory=True)
    (dest / ".gitignore").write_text("__pycache__/\nruns/\nassets/\n")
    make_assets(dest)
    if git:
        for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
            subprocess.run(cmd, cwd=dest, check=True)
    return dest


@pytest.fixture(scope="session")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_toy(tmp_path_factory.mktemp("toy") / "ws")


@pytest.fixture
def at_toy(toy: Path) -> Iterator[Path]:
    with use(toy):
        yield toy


@pytest.fixture(scope="session")
def vae():
    """The pristine frozen VAE on CPU, loaded once (from the synthetic-weights cache)."""
    return C.load_adapter(C.load_goals()).load_model("cpu")


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("workspace")
    for name in ("goals.json", "optimize.py"):
        shutil.copy2(REPO / name, ws / name)
    for name in ("model", "harness"):
        (ws / name).symlink_to(REPO / name, target_is_directory=True)
    make_assets(ws)
    return ws


@pytest.fixture
def at_workspace(workspace: Path) -> Iterator[Path]:
    with use(workspace):
        yield workspace
