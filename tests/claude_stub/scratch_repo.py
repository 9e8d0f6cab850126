"""A throwaway git copy of the project with the tiny assets made and nothing recorded yet.

Used by the tests that play an agent in the real repository layout (test_agent_dry_run.py,
test_claude_code_e2e.py): the frozen files, the shipped optimize.py as committed, the tiny seeded
input and its strict-fp32 reference made with the repo's own tools (about 40 s on 2 CPU cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
COPY = ["goals.json", "optimize.py", "harness", "model", ".claude", "AGENTS.md", "program.md", "PROGRESS.md",
        ".gitignore"]
GIT_ID = {"GIT_AUTHOR_NAME": "scratch", "GIT_AUTHOR_EMAIL": "scratch@example.com",
          "GIT_COMMITTER_NAME": "scratch", "GIT_COMMITTER_EMAIL": "scratch@example.com"}


def harness_env(root: Path) -> dict:
    """The environment the harness runs in: this copy's goals.json, CPU only, no .pyc in the tree."""
    env = dict(os.environ)
    env.update(GIT_ID, AUTO_OPTIM_GOALS=str(root / "goals.json"), CLAUDE_PROJECT_DIR=str(root),
               PYTHONDONTWRITEBYTECODE="1", CUDA_VISIBLE_DEVICES="")
    return env


def run(cmd: list[str], root: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def make_scratch_repo(root: Path) -> dict:
    """Fill the empty folder `root`; return the harness environment for it."""
    root.mkdir(parents=True, exist_ok=True)
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, root / name)
    (root / "CLAUDE.md").symlink_to("AGENTS.md")
    # the shipped candidate as committed, so the run is the same whatever is being tried in the checkout
    shipped = subprocess.run(["git", "-C", str(REPO), "show", "HEAD:optimize.py"], capture_output=True)
    if shipped.returncode == 0:
        (root / "optimize.py").write_bytes(shipped.stdout)
    (root / "assets").mkdir(exist_ok=True)
    env = harness_env(root)
    for cmd in ([sys.executable, "harness/make_latent.py", "--preset", "tiny"],
                [sys.executable, "harness/make_reference.py", "--preset", "tiny", "--device", "cpu"],
                ["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "scratch start"]):
        r = run(cmd, root, env)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    return env
