"""What the agent may do, in one place: the paths it may not write or read, the names it may not
edit in any folder, the commands that may leave its sandbox, and .claude/settings.json made from them.

`auto-optim settings` (harness/cli/settings.py) writes settings(root) to .claude/settings.json;
harness/cli/new_target.py does so after scaffolding a target, so a new target is covered with no hand
edit; tests/test_policy.py checks that the committed file is exactly what this module makes.

How Claude Code 2.1.330 applies the rules on Linux (measured: /work/notes/claude_facts.md, d): a
deny rule on a literal path makes the Bash sandbox (bubblewrap) mount it read-only, existing or not
(a missing folder becomes an empty read-only one), and refuses the file tools; a rule with a glob
(`**/CLAUDE.md`) refuses the file tools only, and a literal rule under a folder that does not exist
makes that whole folder read-only. So every protected path is listed literally for every target
folder, and the glob rules are added for the file tools; a folder the agent makes during a session
can still hold a CLAUDE.md or .gitattributes its bash sandbox lets it write (Claude Code loads a
nested CLAUDE.md into the context when a file beside it is read). The harness ignores them (git
plumbing with filters off: harness/ledger/git_plumbing.py), and the agent's door refuses to run
while one that git does not track lies outside the protected paths (stray_configuration).

Standard library only: the hooks load it (agent/hooks/_hooklib.py), and so does the harness
(harness/paths.py agent_policy), each by its file's location. Outside harness/ and its frozen hash:
it says what the agent may do, not how anything is measured.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Per project: the code the harness and hooks run (and a virtual environment, should one be made
# here), the agent's own contract, Claude Code's configuration, git, what a person runs and installs.
PROJECT_FILES = ("harness", "agent", ".claude", ".git", "AGENTS.md", "CLAUDE.md", "CLAUDE.local.md", "program.md", ".venv", "venv",
                 "scripts", "tests", ".ci", "requirements.txt", "requirements-dev.txt", "pyproject.toml")
# Per target (each targets/<name>/ with a goals.json; the project root too where it holds one, as a
# test's workspace does): what the harness trusts (goals.json, its adapter package and the code
# goals.json names "frozen", added by protected_paths) and writes; and code a person runs outside
# any sandbox: the drop-ins (imported by scripts and tests) and the GPU plans (whose `$ ` lines
# gpu_session.sh runs as they stand).
TARGET_FILES = ("goals.json", "assets", "results.tsv", "leaderboard.md", "records", "runs", "profiles", "quality",
                "progress", "integrations", "plans")
# In each target folder: what git, Claude Code or an MCP client would read as configuration or
# instructions (the guard refuses the file tools these names in any folder).
CONFIG_NAMES = (".gitignore", ".gitattributes", ".mcp.json", "CLAUDE.md", "AGENTS.md", "CLAUDE.local.md")
CONFIG_FOLDERS = (".claude", ".git")
# Of those, what acts from any folder (Claude Code's instructions, git's attributes, a repository):
# not .gitignore, which the harness never consults and tools such as pytest write in their caches.
ACTIVE_ANYWHERE = tuple(n for n in (*CONFIG_NAMES, *CONFIG_FOLDERS) if n != ".gitignore")
# Folders among the names above (a deny rule covers what is below them: `Edit(/runs/**)`).
FOLDERS = {"harness", "agent", ".claude", ".git", ".venv", "venv", "scripts", "tests", ".ci", "integrations", "plans",
           "assets", "records", "runs", "profiles", "quality", "progress"}
# Per target, what the agent may not even read: the benchmark input (made from a secret seed, kept in
# its asset), its reference and the pool. An agent that read the seed could write it into the
# candidate, which would rebuild the input and decode it before the clock starts.
TARGET_SECRETS = ("assets",)
KEY_DIR = "~/.config/auto-optim"  # harness/ledger/signing.py's default key_dir()

# Where the agent writes the variants of a wave (harness/cli/wave.py): beside the candidate, writable.
CANDIDATES_DIR = "candidates"
# What the agent edits: the candidate (goals.json "candidate", optimize.py), the variants, its journal
# and its request to the door (harness/cli/door.py).
AGENT_FILES = ("optimize.py", "PROGRESS.md", f"{CANDIDATES_DIR}/**", "request.json")
# The only commands that run outside the sandbox, compared as whole strings (agent/hooks/guard_frozen.py).
UNSANDBOXED = ("auto-optim-agent", "nvidia-smi", "nvidia-smi -L")
# Tools of Claude Code 2.1.330 that the loop does not use: denied by name (the guard refuses any tool
# outside its LOOP_TOOLS too).
DENIED_TOOLS = ("CronCreate", "CronDelete", "CronList", "EnterWorktree", "ExitWorktree", "Monitor", "Workflow",
                "ScheduleWakeup", "Skill", "NotebookEdit")
HOOK = '/usr/bin/python3 -I "$CLAUDE_PROJECT_DIR/agent/hooks/{}"'


def target_folders(root: Path) -> list[Path]:
    """Every targets/<name>/ that holds a goals.json, after the project root where it holds one."""
    return [*([root] if (root / "goals.json").is_file() else []), *sorted(p.parent for p in root.glob("targets/*/goals.json"))]


def _goals(folder: Path) -> dict[str, Any]:
    try:
        goals = json.loads((folder / "goals.json").read_text())
    except (OSError, ValueError):
        return {}
    return goals if isinstance(goals, dict) else {}


def _prefix(root: Path, folder: Path) -> str:
    rel = folder.relative_to(root).as_posix()
    return "" if rel == "." else rel + "/"


def protected_paths(root: Path) -> list[str]:
    """Every path, relative to the project root, that the agent may not write: PROJECT_FILES, then per
    target TARGET_FILES, its adapter package and "frozen" code, and CONFIG_NAMES / CONFIG_FOLDERS."""
    out = [*PROJECT_FILES, *CONFIG_NAMES, *CONFIG_FOLDERS]
    for folder in target_folders(root):
        prefix = _prefix(root, folder)
        goals = _goals(folder)
        adapter = [str(goals["adapter"]).split(".")[0]] if "adapter" in goals else []
        frozen = goals["frozen"] if isinstance(goals.get("frozen"), list) else []  # code the adapter runs
        out += [prefix + str(name).rstrip("/") for name in (*TARGET_FILES, *adapter, *frozen, *CONFIG_NAMES,
                                                             *CONFIG_FOLDERS)]
    return list(dict.fromkeys(out))


def stray_configuration(root: Path, tracked: set[str]) -> list[str]:
    """ACTIVE_ANYWHERE names under `root` that git does not track (`tracked`: paths from the root)
    and no protected path covers: written by the agent in a folder of its own."""
    protected = set(protected_paths(root))
    active = {n.casefold() for n in ACTIVE_ANYWHERE}
    found = []
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirs[:] = [d for d in dirs if prefix + d not in protected]  # the agent cannot write there
        for name in (*dirs, *files):
            path = prefix + name
            if name.casefold() in active and path not in protected and path not in tracked \
                    and not _claude_codes_own(Path(folder) / name):
                found.append(path)
        dirs[:] = [d for d in dirs if d.casefold() not in active]
    return sorted(found)


def _claude_codes_own(path: Path) -> bool:
    """A .claude/ holding nothing but an empty .cc-writes/: what Claude Code 2.1.330 leaves in a folder
    a Bash call ran in (the e2e helper's measurement). It holds nothing to load."""
    try:
        if path.is_symlink() or os.listdir(path) != [".cc-writes"]:
            return False
        inner = path / ".cc-writes"
        return not inner.is_symlink() and inner.is_dir() and not os.listdir(inner)
    except OSError:
        return False


def secret_paths(root: Path) -> list[str]:
    """Every path, relative to the project root, that the agent may not read (TARGET_SECRETS)."""
    return [_prefix(root, folder) + name for folder in target_folders(root) for name in TARGET_SECRETS]


def is_folder(root: Path, rel: str) -> bool:
    """Whether a protected path is a folder (its deny rule ends in /**): by name, else as on disk."""
    return rel.rsplit("/", 1)[-1] in FOLDERS or (root / rel).is_dir()


def config_name(path: str) -> str | None:
    """The part of `path` that makes it configuration the agent may not write in any folder (a
    CONFIG_NAMES file or anything in a CONFIG_FOLDERS folder), else None. Names are compared
    without regard to case: some tools read CLAUDE.md spelled otherwise, and no candidate needs it."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    folders = {n.casefold() for n in CONFIG_FOLDERS}
    for part in parts[:-1]:
        if part.casefold() in folders:
            return part
    if parts and (parts[-1].casefold() in folders or parts[-1].casefold() in {n.casefold() for n in CONFIG_NAMES}):
        return parts[-1]
    return None


def agent_files(root: Path) -> list[str]:
    """AGENT_FILES of every target folder, as allow rules name them (from the project root)."""
    return [(f"/{_prefix(root, folder)}" if folder != root else "") + name
            for folder in target_folders(root) for name in AGENT_FILES]


def settings(root: Path) -> dict[str, Any]:
    """.claude/settings.json for the project at `root` (see the module docstring)."""
    deny = [f"Edit(/{p}/**)" if is_folder(root, p) else f"Edit(/{p})" for p in protected_paths(root)]
    deny += [f"Edit(**/{n})" for n in CONFIG_NAMES] + [f"Edit(**/{n}/**)" for n in CONFIG_FOLDERS]
    deny += [f"Read(/{p}/**)" for p in secret_paths(root)] + [f"Read({KEY_DIR}/**)"]
    deny += list(DENIED_TOOLS)
    return {
        # Claude Code keeps a Bash call's cwd for the next one (the agent could start the door in a folder
        # of its choosing); this makes every call start at the project root again (measured with 2.1.330).
        "env": {"CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR": "1"},
        "sandbox": {"enabled": True, "failIfUnavailable": True, "autoAllowBashIfSandboxed": True,
                    "allowUnsandboxedCommands": True, "filesystem": {"denyRead": [KEY_DIR]}},
        "permissions": {"allow": [f"Edit({p})" for p in agent_files(root)] + [f"Bash({c})" for c in UNSANDBOXED],
                        "deny": list(dict.fromkeys(deny))},
        "hooks": {
            "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": HOOK.format("guard_frozen.py"),
                                                       "timeout": 10}]}],
            "Stop": [{"hooks": [{"type": "command", "command": HOOK.format("stop_gate.py"), "timeout": 30}]}],
            "SubagentStop": [{"hooks": [{"type": "command", "command": HOOK.format("stop_gate.py"), "timeout": 30}]}],
        },
    }


def settings_text(root: Path) -> str:
    """settings(root) as the file holds it."""
    return json.dumps(settings(root), indent=2) + "\n"
