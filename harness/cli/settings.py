"""`auto-optim settings`: .claude/settings.json written from agent/policy.py, the one place Claude Code's
permissions for this checkout are decided (harness/cli/person.py's verb; harness/cli/new_target.py writes it
again for a new target)."""

from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def write_settings(check: bool = False) -> int:
    """.claude/settings.json from agent/policy.py (--check: exit 1 when it differs)."""
    from harness.paths import agent_policy

    policy = agent_policy()

    path = CHECKOUT / ".claude" / "settings.json"
    text = policy.settings_text(CHECKOUT)
    current = path.read_text() if path.is_file() else None
    if check:
        print(f"{path}: {'as generated' if current == text else 'differs from agent/policy.py'}")
        return 0 if current == text else 1
    if current != text:
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".settings.json.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    print(f"{path}: written from agent/policy.py (restart Claude Code to load it)")
    return 0
