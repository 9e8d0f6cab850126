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

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

# What only a person may change: .claude/settings.json denies the agent writes to each, file tools
# and shell (the bubblewrap sandbox mounts them read-only) alike; tests/test_hooks.py checks that it
# names every one of protected_paths(). Per target (the project root, and each targets/<name>/ with a
# goals.json): what the harness trusts (goals.json, its adapter package, the code goals.json names
# "frozen") and writes (the rest).
TARGET_FILES = ("goals.json", "assets", "results.tsv", "leaderboard.md", "records", "runs", "profiles", "quality",
                "progress")
# Per project: the code the harness and hooks run (and a virtual environment, should one be made
# here), the agent's own contract, Claude Code's configuration, git, and what a person runs.
PROJECT_FILES = ("harness", ".claude", ".git", "AGENTS.md", "CLAUDE.md", "CLAUDE.local.md", "program.md", ".venv", "venv",
                 "scripts", "tests", ".ci", "requirements.txt", "requirements-dev.txt",
                 # code a person runs outside any sandbox: the drop-ins (imported by scripts and
                 # tests) and the GPU plans (whose `$ ` lines gpu_session.sh runs as they stand)
                 "integrations", "experiments")

# Where the agent writes the variants of a wave (harness/wave.py): beside the candidate, writable.
CANDIDATES_DIR = "candidates"

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
    return Path(os.path.abspath(__file__)).parent.parent.parent


def candidate_name(root: Path) -> str:
    """The editable file named by goals.json ("candidate"), optimize.py by default."""
    try:
        goals = json.loads((root / "goals.json").read_text())
        return str(goals.get("candidate") or "optimize.py")
    except (OSError, ValueError):
        return "optimize.py"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# Per target, what the agent may not even read: the benchmark input (made from a secret seed, kept in
# its asset), its reference and the pool. An agent that read the seed could write it into the
# candidate, which would rebuild the input and decode it before the clock starts.
TARGET_SECRETS = ("assets",)


def secret_paths(root: Path) -> list[str]:
    """Every path, relative to the project root, that the agent may not read (TARGET_SECRETS)."""
    out = []
    for folder in target_folders(root):
        rel = folder.relative_to(root).as_posix()
        out += [("" if rel == "." else rel + "/") + name for name in TARGET_SECRETS]
    return out


def target_folders(root: Path) -> list[Path]:
    """The project root and every targets/<name>/ that holds a goals.json."""
    return [root, *sorted(p.parent for p in root.glob("targets/*/goals.json"))]


def protected_paths(root: Path) -> list[str]:
    """Every path, relative to the project root, that the agent may not write (see TARGET_FILES)."""
    out = list(PROJECT_FILES)
    for folder in target_folders(root):
        rel = folder.relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        try:
            goals = json.loads((folder / "goals.json").read_text())
        except (OSError, ValueError):
            goals = {}
        goals = goals if isinstance(goals, dict) else {}
        adapter = [str(goals["adapter"]).split(".")[0]] if "adapter" in goals else []
        frozen = goals["frozen"] if isinstance(goals.get("frozen"), list) else []  # code the adapter runs
        out += [prefix + str(name).rstrip("/") for name in (*TARGET_FILES, *adapter, *frozen)]
    return out
