#!/usr/bin/env python3
"""A test-only Stop / SubagentStop hook that records each payload the real CLI sends.

Usage (in --settings): python3 tests/claude_stub/stop_observer.py DIR
Appends the payload, with the sha256 of the default target's optimize.py at that moment (the cwd's
targets/<name>/optimize.py, <name> from its pyproject.toml: what the stop gate running beside it
sees), to DIR/stops.jsonl and touches DIR/<hook_event_name>.seen, so a scripted model turn can wait
for "the main agent's Stop hook has run" (model_server's wait_file).
It never decides anything: no output, exit 0.
"""

import hashlib
import json
import sys
import tomllib
from pathlib import Path

out = Path(sys.argv[1])
payload = json.load(sys.stdin)
root = Path(payload.get("cwd", "."))
target = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["auto-optim"]["target"]
candidate = root / "targets" / target / "optimize.py"
payload["observed_candidate_sha"] = hashlib.sha256(candidate.read_bytes()).hexdigest() if candidate.is_file() else None
with open(out / "stops.jsonl", "a") as f:
    f.write(json.dumps(payload) + "\n")
(out / f"{payload.get('hook_event_name', 'unknown')}.seen").touch()
