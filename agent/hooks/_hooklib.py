"""Shared pieces of the Claude Code hooks: read the payload, find the project, name the frozen paths.

Standard library only (no torch): a hook runs on every tool call and must answer in milliseconds.

Claude Code runs a command hook with one JSON object on stdin. The fields used here (see
https://code.claude.com/docs/en/hooks, "Hook input"): session_id, transcript_path, cwd,
hook_event_name, and per event tool_name / tool_input (PreToolUse) or stop_hook_active and
background_tasks (Stop, SubagentStop). A subagent's payloads carry its parent's session_id plus its
own agent_id and agent_type (checked with Claude Code 2.1.330). It sets CLAUDE_PROJECT_DIR to the
project root in the hook's environment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

# This file is agent/hooks/_hooklib.py: the project is two folders up.
PROJECT = Path(os.path.abspath(__file__)).parent.parent.parent


def load(rel: str) -> ModuleType:
    """A standard-library-only module of this project, by its file's location (no sys.path edit):
    the hooks run as `python3 -I` scripts, outside any package."""
    name = "_hook_" + Path(rel).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, PROJECT / rel)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# What the agent may not write or read, and the names it may not edit anywhere: agent/policy.py, the
# one source of .claude/settings.json. The no-follow reader and git's plumbing: the harness's own.
policy = load("agent/policy.py")
nofollow = load("harness/nofollow.py")
git_plumbing = load("harness/ledger/git_plumbing.py")
CANDIDATES_DIR, PROJECT_FILES, TARGET_FILES, TARGET_SECRETS = (policy.CANDIDATES_DIR, policy.PROJECT_FILES,
                                                               policy.TARGET_FILES, policy.TARGET_SECRETS)
protected_paths, secret_paths, target_folders = policy.protected_paths, policy.secret_paths, policy.target_folders

# The subagent that runs experiments (.claude/agents/): the one subagent that edits the candidate.
OPTIMIZER_AGENT = "model-optimizer"


def read_payload() -> dict[str, Any]:
    try:
        data = json.load(sys.stdin)
    except (json.JSONDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def project_root(payload: dict[str, Any]) -> Path:
    """CLAUDE_PROJECT_DIR, else the folder of AUTO_OPTIM_GOALS, else the nearest folder above
    the payload's cwd that holds goals.json, else the repository this script lives in."""
    env = os.environ.get("CLAUDE_PROJECT_DIR")
    if env:
        return Path(os.path.abspath(env))
    goals = os.environ.get("AUTO_OPTIM_GOALS")
    if goals:
        return Path(os.path.abspath(goals)).parent
    cwd = payload.get("cwd")
    if cwd:
        p = Path(os.path.abspath(cwd))
        for d in (p, *p.parents):
            if (d / "goals.json").is_file():
                return d
    return PROJECT


def target_root(project: Path) -> Path:
    """The target the agent works on: the project's default (pyproject.toml's [tool.auto-optim]
    target, targets/NAME/, where it holds a goals.json), else the project itself (a test's workspace,
    its goals.json at the top)."""
    try:
        with open(project / "pyproject.toml", "rb") as f:
            name = tomllib.load(f)["tool"]["auto-optim"]["target"]
    except (OSError, ValueError, KeyError, TypeError):
        return project
    ok = isinstance(name, str) and name[:1].isalpha() and name.replace("-", "_").isidentifier()
    folder = project / "targets" / name if ok else project
    return folder if (folder / "goals.json").is_file() else project


def candidate_name(root: Path) -> str:
    """The editable file named by goals.json ("candidate"), optimize.py by default."""
    try:
        goals = json.loads((root / "goals.json").read_text())
        return str(goals.get("candidate") or "optimize.py")
    except (OSError, ValueError):
        return "optimize.py"


def shown(project: Path, folder: Path, name: str) -> str:
    """`name` in the target `folder` as the agent's shell names it: from the project root, where every
    Bash call starts (settings.json: CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR)."""
    return os.path.relpath(folder / name, project)
