"""Run the real Claude Code CLI headless (`claude -p`) against the scripted model server.

find_cli(): the pinned CLI that .ci/install-claude-code.sh installs (or CLAUDE_CODE_BIN, or
`claude` on PATH), None when absent. run_claude(): one session in `repo` with a scratch HOME
whose ~/.claude.json marks `repo` as trusted: without that the CLI ignores the project's
permission allow rules ("this workspace has not been trusted"), which is the trust step a person
takes once by accepting the dialog.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from model_server import ModelServer

PINNED = "2.1.330"
CI_PREFIX = Path(os.environ.get("CLAUDE_CODE_PREFIX", Path.home() / ".cache" / "auto-optim" / f"claude-code-{PINNED}"))


def find_cli() -> str | None:
    for candidate in (os.environ.get("CLAUDE_CODE_BIN"), str(CI_PREFIX / "node_modules" / ".bin" / "claude"),
                      shutil.which("claude")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def cli_version(cli: str) -> str:
    return subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=60).stdout.split()[0]


def trusted_home(home: Path, repo: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    state = {"hasCompletedOnboarding": True, "projects": {str(repo): {"hasTrustDialogAccepted": True}}}
    (home / ".claude.json").write_text(json.dumps(state))
    return home


def run_claude(cli: str, repo: Path, home: Path, server: ModelServer, prompt: str, harness_env: dict,
               extra_args: list[str] = (), timeout: float = 900) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """One `claude -p` session; returns the process and its stream-json events."""
    env = {k: v for k, v in harness_env.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(HOME=str(trusted_home(home, repo)), ANTHROPIC_BASE_URL=server.base_url,
               ANTHROPIC_API_KEY="sk-ant-offline-dummy", DISABLE_AUTOUPDATER="1",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    cmd = [cli, "-p", prompt, "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits",
           *extra_args]
    p = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    events = []
    for line in p.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return p, events
