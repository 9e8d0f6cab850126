"""A scripted dry run of the Claude Code loop on the tiny preset, with no model API.

The test plays the agent in a temporary git copy of the repository and calls the hooks exactly as
Claude Code would (JSON on stdin, CLAUDE_PROJECT_DIR set), in the order of one loop turn:
  1. edit optimize.py (the Edit tool is allowed there)
  2. try to end the turn  -> the Stop hook blocks and names the command to run
  3. try to change harness/cli/verify.py from an unsandboxed shell, or to reach the harness with a
     person's flag -> the PreToolUse hook blocks
  4. write request.json and run the door, `auto-optim-agent` (the scratch copy's harness/cli/door.py,
     which serves that copy), for real, as an unsandboxed Bash call (tiny, CPU)
  5. try to end the turn again -> allowed
It takes about a minute on 2 CPU cores (one experiment = a verify and a bench process, each
loading the VAE).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import tool

REPO = Path(__file__).resolve().parent.parent
from scratch_repo import TARGET, make_scratch_repo

pytestmark = pytest.mark.skipif(not (REPO / "harness" / "cli" / "run_experiment.py").is_file(),
                                reason="harness/cli/run_experiment.py not present")


def sh(cmd: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def agent_repo(tmp_path_factory, toy) -> tuple[Path, dict]:
    """A fresh git checkout of the project with the toy's tiny assets, nothing recorded yet."""
    root = tmp_path_factory.mktemp("dry_run") / "repo"
    return root, make_scratch_repo(root, assets_from=toy / "assets")


def hook(name: str, payload: dict, root: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "agent" / "hooks" / name)], input=json.dumps(payload),
                          capture_output=True, text=True, env=env, timeout=30)


def payload(root: Path, session: str, event: str, **extra) -> dict:
    return {"session_id": session, "transcript_path": f"/tmp/{session}.jsonl", "cwd": str(root),
            "permission_mode": "acceptEdits", "hook_event_name": event, **extra}


def test_one_loop_turn_as_the_agent(agent_repo):
    root, env = agent_repo
    session = str(uuid.uuid4())
    cand = root / TARGET / "optimize.py"

    # 1. the agent edits optimize.py: the guard lets the Edit through, then the edit happens
    text = cand.read_text()
    old = text.rstrip("\n").splitlines()[-1]
    edit = {"file_path": str(cand), "old_string": old, "new_string": old + "\n# dry run: the agent's edit"}
    r = hook("guard_frozen.py", payload(root, session, "PreToolUse", tool_name="Edit", tool_input=edit,
                                        tool_use_id="toolu_1"), root, env)
    assert r.returncode == 0, r.stderr
    cand.write_text(text.replace(old, edit["new_string"]))

    # 2. it tries to end the turn: blocked, told exactly what to run
    r = hook("stop_gate.py", payload(root, session, "Stop", stop_hook_active=False), root, env)
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["decision"] == "block"
    assert '{"run": "experiment", "desc": ' in d["reason"] and "`auto-optim-agent`" in d["reason"]

    # 3. it tries to loosen the evaluator from outside the sandbox instead: blocked (inside it, the
    #    deny rules and bubblewrap refuse the write: tests/test_claude_code_e2e.py)
    tin = {"command": "sed -i 's/passed/True/' harness/cli/verify.py", "dangerouslyDisableSandbox": True}
    r = hook("guard_frozen.py", payload(root, session, "PreToolUse", tool_name="Bash", tool_input=tin,
                                        tool_use_id="toolu_2"), root, env)
    assert r.returncode == 2 and "frozen" in r.stderr, r.stderr
    for cmd in ('python harness/cli/run_experiment.py --desc "x#y" --rebaseline', "auto-optim-agent #x --rebaseline"):
        tin = {"command": cmd, "dangerouslyDisableSandbox": True}
        r = hook("guard_frozen.py", payload(root, session, "PreToolUse", tool_name="Bash", tool_input=tin,
                                            tool_use_id="toolu_2b"), root, env)
        assert r.returncode == 2 and "only these exact commands" in r.stderr, r.stderr

    # 4. it asks for the experiment and runs the door for real, outside the sandbox (the guard allows
    #    the exact string first)
    (root / TARGET / "request.json").write_text(json.dumps({"run": "experiment", "desc": "dry run: annotate info",
                                                   "preset": "tiny", "no_profile": True}))
    r = hook("guard_frozen.py", payload(root, session, "PreToolUse", tool_name="Bash", tool_input={
        "command": "auto-optim-agent", "dangerouslyDisableSandbox": True}, tool_use_id="toolu_3"), root, env)
    assert r.returncode == 0, r.stderr
    (root / TARGET / "candidates").mkdir(exist_ok=True)
    r = sh([*tool("harness.cli.door", root)], root / TARGET / "candidates", env)  # the door ignores its cwd
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    rows = (root / TARGET / "results.tsv").read_text().strip().splitlines()
    assert len(rows) == 3 and "baseline" in rows[1] and "dry run: annotate info" in rows[-1]  # header, baseline, it
    assert not (root / TARGET / "request.json").exists()  # consumed: never run twice

    # 5. now the turn may end (stop_hook_active: Claude is continuing after the earlier block)
    r = hook("stop_gate.py", payload(root, session, "Stop", stop_hook_active=True), root, env)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout
