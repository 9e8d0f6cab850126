"""A throwaway git copy of the project, retargeted to the toy model, with the tiny assets made and
nothing recorded yet.

Used by the tests that play an agent in the real repository layout (test_agent_dry_run.py,
test_claude_code_e2e.py): the harness, hooks, .claude/, AGENTS.md and program.md as they are here,
with tests/toy_target's goals.json, adapter package and optimize.py in place of the VAE's (the
wiring under test does not depend on the model, and an experiment on the toy takes seconds on two
CPU cores instead of minutes). Its tiny input, reference and pool are made with the repo's tools,
or copied from a toy workspace that has them (tests/conftest.py's `toy` fixture: the same goals.json
and adapter, so the same assets, and two interpreter starts fewer).

Its .claude/settings.json is made as a person makes it after retargeting (`auto-optim settings`:
agent/policy.py, from the copy's own goals.json), and install_entry_points() stands for
`pip install -e` of the copy: the console scripts pyproject.toml names, in a folder outside it that
the test puts first on PATH, so `auto-optim-agent` serves this copy and not the main checkout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from harness import start

REPO = Path(__file__).resolve().parent.parent.parent
TOY = REPO / "tests" / "toy_target"
COPY = [REPO / "harness", REPO / "agent", REPO / ".claude", REPO / "AGENTS.md", REPO / "program.md", REPO / ".gitignore", REPO / "pyproject.toml"]
# The copy's one target, the default its pyproject.toml names: the toy's goals.json and adapter package,
# with the worked example's journal and candidates/ folder.
TARGET = Path("targets") / "toy"
TARGET_COPY = [REPO / "targets" / "wan-vae" / "PROGRESS.md", REPO / "targets" / "wan-vae" / "candidates", TOY / "goals.json",
               TOY / "toymodel"]
# The frozen toy model sleeps TOY_DELAY_S a call, which its fp32 eager baseline pays in full; this
# candidate sleeps less, so the experiments the tests run are keepers by construction.
DELAY_S = "0.3"
CANDIDATE = '''"""The scratch repository's editable file: the toy model with a shorter sleep than the baseline's."""


def build_decoder(model, example_input):
    model.delay = 0.05

    def forward_fn(x):
        return model(x)

    return forward_fn, {"delay": 0.05}
'''
GIT_ID = {"GIT_AUTHOR_NAME": "scratch", "GIT_AUTHOR_EMAIL": "scratch@example.com",
          "GIT_COMMITTER_NAME": "scratch", "GIT_COMMITTER_EMAIL": "scratch@example.com"}


def harness_env(root: Path) -> dict:
    """The environment the harness runs in: this copy's goals.json, CPU only, no .pyc in the tree."""
    env = {k: v for k, v in os.environ.items() if k != "AUTO_OPTIM_KEY_DIR"}  # the key where settings.json hides it
    env.update(GIT_ID, AUTO_OPTIM_GOALS=str(root / TARGET / "goals.json"), CLAUDE_PROJECT_DIR=str(root),
               PYTHONDONTWRITEBYTECODE="1", CUDA_VISIBLE_DEVICES="", TOY_DELAY_S=DELAY_S)
    return env


def write_settings(root: Path) -> None:
    """.claude/settings.json for the copy as it stands (its targets, adapter and frozen code), from its
    own policy module; a checkout without one (before issue 40) gets the toy's deny rules added by hand."""
    policy_file = root / "agent" / "policy.py"
    if policy_file.is_file():
        spec = importlib.util.spec_from_file_location("scratch_policy", policy_file)
        policy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(policy)
        (root / ".claude" / "settings.json").write_text(policy.settings_text(root))
        return
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    deny = settings["permissions"]["deny"]
    deny += [rule for rule in (f"Edit(/{TARGET}/toymodel/**)", f"Edit(/{TARGET}/split.py)") if rule not in deny]
    (root / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))


def install_entry_points(root: Path, bin_dir: Path) -> list[str]:
    """What `pip install -e ROOT` puts on PATH, for the copy: a script per pyproject.toml
    [project.scripts] entry in bin_dir (outside the copy), run by this interpreter (outside it too),
    importing the copy's package from its folder, as the editable install's finder does (the copy's
    root is never on sys.path: harness/__init__.py refuses it). The names made ([] for a checkout without pyproject.toml: nothing to install)."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return []
    scripts = tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {})
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, target in scripts.items():
        module, _, func = target.partition(":")
        package = str(root / "harness")
        (bin_dir / name).write_text(
            f"#!{sys.executable}\nimport importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('harness', {package + '/__init__.py'!r}, "
            f"submodule_search_locations=[{package!r}])\n"
            "sys.modules['harness'] = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(sys.modules['harness'])\n"
            f"from {module} import {func}\nsys.exit({func}())\n")
        (bin_dir / name).chmod(0o755)
    return sorted(scripts)


def run(cmd: list[str], root: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def make_scratch_repo(root: Path, assets_from: Path | None = None) -> dict:
    """Fill the empty folder `root`; return the harness environment for it. `assets_from`: a toy
    workspace's assets/ to copy instead of making them."""
    root.mkdir(parents=True, exist_ok=True)
    target = root / TARGET
    target.mkdir(parents=True)
    for src, into in [*((s, root) for s in COPY), *((s, target) for s in TARGET_COPY)]:
        if src.is_dir():
            shutil.copytree(src, into / src.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, into / src.name)
    pyproject = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(pyproject.replace('target = "wan-vae"', f'target = "{TARGET.name}"'))
    (root / "CLAUDE.md").symlink_to("AGENTS.md")
    # Retargeted: the toy's adapter package is protected as model/ is, and so is the code its
    # goals.json names "frozen" (split.py, as the VAE's names its split decode): a person adds
    # their deny rules (_hooklib.protected_paths lists both).
    (target / "split.py").write_text("# code the adapter would run, frozen by goals.json\n")
    goals = json.loads((target / "goals.json").read_text())
    (target / "goals.json").write_text(json.dumps(goals | {"frozen": ["split.py"]}, indent=2))
    write_settings(root)
    (target / "optimize.py").write_text(CANDIDATE)
    env = harness_env(root)
    make = [start.command("harness.target.make_latent", "--preset", "tiny", "--seeded", harness=root / "harness"),
            start.command("harness.target.make_reference", "--preset", "tiny", "--device", "cpu", harness=root / "harness")]
    if assets_from is not None:
        shutil.copytree(assets_from, target / "assets")
        make = []
    else:
        (target / "assets").mkdir(exist_ok=True)
    for cmd in (*make, ["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "scratch start"]):
        r = run(cmd, root, env)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    return env
