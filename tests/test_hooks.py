"""The Claude Code hooks (harness/hooks/) fed the JSON Claude Code sends them.

Each hook runs as Claude Code runs it: a subprocess with one JSON object on stdin and
CLAUDE_PROJECT_DIR in its environment. Payload fields follow the hooks reference
(https://code.claude.com/docs/en/hooks): session_id, transcript_path, cwd, permission_mode,
hook_event_name, plus tool_name / tool_input / tool_use_id (PreToolUse) or stop_hook_active (Stop).
Decisions checked: PreToolUse refusal = exit 2 + reason on stderr; Stop refusal = exit 0 +
{"decision": "block", "reason": ...} on stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "harness" / "hooks"
COLUMNS = ["exp", "commit", "timestamp", "desc", "status", "median_s", "spread_s", "psnr_db", "max_abs",
           "speedup_vs_fp32", "gpu", "preset", "weights", "frozen_hash", "candidate_sha", "versions"]


def run_hook(name: str, payload: dict, project: Path, *args: str, env: dict | None = None):
    e = {k: v for k, v in os.environ.items() if k not in ("AUTO_OPTIM_UNFREEZE", "AUTO_OPTIM_GOALS")}
    e["CLAUDE_PROJECT_DIR"] = str(project)
    e.update(env or {})
    return subprocess.run([sys.executable, str(HOOKS / name), *args], input=json.dumps(payload),
                          capture_output=True, text=True, env=e, timeout=30)


def base(project: Path, event: str, session: str | None = None) -> dict:
    sid = session or str(uuid.uuid4())
    return {"session_id": sid, "transcript_path": f"/home/u/.claude/projects/x/{sid}.jsonl",
            "cwd": str(project), "permission_mode": "default", "hook_event_name": event}


def tool(project: Path, name: str, tool_input: dict, **extra) -> dict:
    return {**base(project, "PreToolUse"), "tool_name": name, "tool_input": tool_input,
            "tool_use_id": "toolu_01ABCDEF", **extra}


def stop(project: Path, active: bool = False, session: str | None = None, event: str = "Stop", **extra) -> dict:
    """A Stop payload as Claude Code 2.1.330 sends it (background_tasks, last_assistant_message...)."""
    return {**base(project, event, session), "stop_hook_active": active, "last_assistant_message": "Done.",
            "background_tasks": [], "session_crons": [], **extra}


def subagent_stop(project: Path, agent_type: str, agent_id: str, active: bool = False,
                  session: str | None = None) -> dict:
    """A SubagentStop payload: the parent's session_id plus the subagent's own id and type."""
    return stop(project, active, session, "SubagentStop", agent_id=agent_id, agent_type=agent_type,
                agent_transcript_path=f"/home/u/.claude/projects/x/subagents/agent-{agent_id}.jsonl")


def background_task(status: str = "running", agent_type: str | None = "model-optimizer", command: str | None = None):
    """One entry of the Stop payload's background_tasks, as the real CLI lists it."""
    task = {"id": "a1b2c3", "type": "subagent" if agent_type else "shell", "status": status, "description": "work"}
    if agent_type:
        task["agent_type"] = agent_type
    if command:
        task["command"] = command
    return task


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A minimal project tree: the frozen folders and files, the candidate, an empty record."""
    for d in ("harness", "model", "assets", ".claude", "profiles"):
        (tmp_path / d).mkdir()
    (tmp_path / "harness" / "verify.py").write_text("# frozen\n")
    (tmp_path / "model" / "vae.py").write_text("# frozen\n")
    (tmp_path / "goals.json").write_text(json.dumps({"candidate": "optimize.py"}))
    (tmp_path / "optimize.py").write_text("def build_decoder(vae, z):\n    return vae.decode, {}\n")
    (tmp_path / "leaderboard.md").write_text("# Leaderboard\n")
    (tmp_path / "PROGRESS.md").write_text("# Progress\n")
    return tmp_path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_rows(project: Path, *rows: tuple[str, str, str]) -> None:
    """rows of (exp, status, candidate_sha)."""
    lines = ["\t".join(COLUMNS)]
    for exp, status, csha in rows:
        row = dict.fromkeys(COLUMNS, "")
        row.update(exp=exp, status=status, candidate_sha=csha, desc=f"attempt {exp}", median_s="1.0")
        lines.append("\t".join(row[c] for c in COLUMNS))
    (project / "results.tsv").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- guard_frozen: edit tools

@pytest.mark.parametrize("tool_name,key,rel", [
    ("Edit", "file_path", "harness/verify.py"),
    ("Write", "file_path", "harness/new_helper.py"),
    ("Edit", "file_path", "model/vae.py"),
    ("Write", "file_path", "goals.json"),
    ("Write", "file_path", "assets/reference_full.pt"),
    ("Edit", "file_path", "results.tsv"),
    ("Edit", "file_path", "leaderboard.md"),
    ("Write", "file_path", ".claude/settings.json"),
    ("NotebookEdit", "notebook_path", "harness/notes.ipynb"),
])
def test_edit_tools_on_frozen_paths_are_blocked(project, tool_name, key, rel):
    tin = {key: str(project / rel), "old_string": "a", "new_string": "b", "content": "x", "new_source": "x"}
    r = run_hook("guard_frozen.py", tool(project, tool_name, tin), project)
    assert r.returncode == 2, r.stderr
    assert "frozen" in r.stderr and rel.split("/")[0] in r.stderr
    assert "optimize.py" in r.stderr  # says what is allowed instead


@pytest.mark.parametrize("rel", ["optimize.py", "PROGRESS.md", "/tmp/scratch.py", "profiles/notes.md"])
def test_edit_tools_elsewhere_are_allowed(project, rel):
    path = rel if rel.startswith("/") else str(project / rel)
    r = run_hook("guard_frozen.py", tool(project, "Edit", {"file_path": path, "old_string": "a", "new_string": "b"}),
                 project)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_relative_path_and_symlink_into_frozen_are_blocked(project):
    r = run_hook("guard_frozen.py", tool(project, "Write", {"file_path": "model/x.py", "content": ""}), project)
    assert r.returncode == 2
    link = project / "innocent.py"
    link.symlink_to(project / "harness" / "verify.py")
    r = run_hook("guard_frozen.py", tool(project, "Edit", {"file_path": str(link), "old_string": "a",
                                                           "new_string": "b"}), project)
    assert r.returncode == 2 and "harness" in r.stderr


def test_optimizer_subagent_may_edit_only_the_candidate(project):
    payload = tool(project, "Edit", {"file_path": str(project / "PROGRESS.md"), "old_string": "a", "new_string": "b"},
                   agent_id="agent-1", agent_type="model-optimizer")
    r = run_hook("guard_frozen.py", payload, project)
    assert r.returncode == 2 and "may edit only optimize.py" in r.stderr
    payload["tool_input"]["file_path"] = str(project / "optimize.py")
    assert run_hook("guard_frozen.py", payload, project).returncode == 0
    # the same rule from the subagent's frontmatter hook
    r = run_hook("guard_frozen.py", tool(project, "Write", {"file_path": "/tmp/x.py", "content": ""}), project,
                 "--only-candidate")
    assert r.returncode == 2


def test_unfreeze_env_lets_a_person_retarget(project):
    r = run_hook("guard_frozen.py", tool(project, "Edit", {"file_path": str(project / "goals.json"),
                                                           "old_string": "a", "new_string": "b"}),
                 project, env={"AUTO_OPTIM_UNFREEZE": "1"})
    assert r.returncode == 0


# ---------------------------------------------------------------- guard_frozen: Bash

BLOCKED_COMMANDS = [
    "echo '# hacked' > harness/verify.py",
    "printf x >> results.tsv",
    "python harness/bench.py &> leaderboard.md",
    "cat /tmp/x | tee harness/verify.py",
    "tee -a results.tsv < /tmp/row.tsv",
    "sed -i 's/min_psnr_db/x/' goals.json",
    "sed -Ei.bak 's/a/b/' model/vae.py",
    "perl -pi -e 's/45.0/20.0/' goals.json",
    "rm harness/verify.py",
    "rm -rf assets",
    "rm -rf *",
    "cd harness && rm -f verify.py",
    "mv model/vae.py /tmp/",
    "cp /tmp/verify.py harness/verify.py",
    "cp -t harness /tmp/verify.py",
    "ln -sf /tmp/v.py harness/verify.py",
    "truncate -s 0 results.tsv",
    "touch model/new.py",
    "chmod -R u+w .claude",
    "dd if=/dev/zero of=assets/reference_full.pt bs=1 count=1",
    "find . -name '*.tsv' -delete",
    "git checkout -- harness/verify.py",
    "git checkout HEAD~3 -- goals.json",
    "git checkout .",
    "git restore model/",
    "git reset --hard HEAD",
    "git reset HEAD~1",
    "git stash",
    "git clean -fdx",
    "git commit -am 'sneak'",
    "git checkout some-branch",
    "git apply /tmp/fix.diff",
    "patch -p1 < /tmp/fix.diff",
    "python -c \"open('goals.json', 'w').write('{}')\"",
    "python3 -c 'from pathlib import Path; Path(\"harness/verify.py\").write_text(\"\")'",
    "python -c \"import os; os.remove('results.tsv')\"",
    "python - <<'EOF'\nimport shutil\nshutil.rmtree('model')\nEOF",
    "bash -c 'echo x > goals.json'",
    "sh -c \"rm model/vae.py\"",
    "eval 'rm harness/verify.py'",
    "ls harness | xargs rm",
    "echo ok; echo x > leaderboard.md",
    "true && (cd model && rm vae.py)",
    "python harness/run_experiment.py --rebaseline",
    "vim harness/verify.py",
]


@pytest.mark.parametrize("command", BLOCKED_COMMANDS)
def test_bash_commands_that_modify_frozen_files_are_blocked(project, command):
    r = run_hook("guard_frozen.py", tool(project, "Bash", {"command": command, "description": "x"}), project)
    assert r.returncode == 2, f"not blocked: {command}"
    assert r.stderr.startswith("guard_frozen: blocked.")


ALLOWED_COMMANDS = [
    "cat harness/verify.py",
    "grep -n gate goals.json",
    "sed -n '1,40p' harness/run_experiment.py",
    "head -5 results.tsv; tail -n 20 results.tsv",
    "python harness/run_experiment.py --desc 'bf16 weights + channels_last_3d' 2>&1 | tail -20",
    "python harness/verify.py --preset tiny > /tmp/verify.txt 2>&1",
    "python harness/bench.py --baseline",
    "python harness/profile.py --out /tmp/p.md",
    "python -c \"import json; print(json.load(open('goals.json'))['gate'])\"",
    "git status && git log --oneline -15 && git diff optimize.py",
    "git show HEAD:optimize.py > /tmp/best.py",
    "git checkout -- optimize.py",
    "cp /tmp/best.py optimize.py",
    "cp harness/verify.py /tmp/read_me.py",
    "echo 'tried X: no gain' >> PROGRESS.md",
    "sed -i 's/float32/bfloat16/' optimize.py",
    "rm -rf /tmp/scratch",
    "ls -la .claude assets profiles",
    "nvidia-smi",
    "TORCH_LOGS=graph_breaks python harness/bench.py 2>&1 | grep -i break",
]


@pytest.mark.parametrize("command", ALLOWED_COMMANDS)
def test_reads_and_harness_runs_are_allowed(project, command):
    r = run_hook("guard_frozen.py", tool(project, "Bash", {"command": command}), project)
    assert r.returncode == 0, f"blocked: {command}: {r.stderr}"


def test_other_tools_pass(project):
    r = run_hook("guard_frozen.py", tool(project, "Read", {"file_path": str(project / "harness" / "verify.py")}),
                 project)
    assert r.returncode == 0


# ---------------------------------------------------------------- stop_gate

def decision(r) -> dict:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.strip() else {}


def test_stop_allowed_with_no_record_yet(project):
    assert decision(run_hook("stop_gate.py", stop(project), project)) == {}


def test_stop_allowed_when_candidate_is_the_last_recorded(project):
    write_rows(project, ("e001", "baseline", sha(project / "optimize.py")))
    assert decision(run_hook("stop_gate.py", stop(project), project)) == {}


def test_stop_blocked_while_candidate_is_unrecorded(project):
    write_rows(project, ("e001", "baseline", sha(project / "optimize.py")))
    (project / "optimize.py").write_text("# an edit nobody measured\n")
    d = decision(run_hook("stop_gate.py", stop(project), project))
    assert d["decision"] == "block"
    assert "python harness/run_experiment.py --desc" in d["reason"]
    assert "e001" in d["reason"] and "git checkout -- optimize.py" in d["reason"]


def test_short_recorded_sha_prefix_counts(project):
    write_rows(project, ("e001", "baseline", sha(project / "optimize.py")[:16]))
    assert decision(run_hook("stop_gate.py", stop(project), project)) == {}


def test_stop_allowed_after_revert_restored_the_keeper(project):
    keeper = sha(project / "optimize.py")
    write_rows(project, ("e001", "baseline", keeper), ("e002", "keep", keeper), ("e003", "revert", "ab" * 32))
    assert decision(run_hook("stop_gate.py", stop(project), project)) == {}


@pytest.mark.parametrize("status", ["gate_fail", "crash", "timeout"])
def test_stop_blocked_after_a_red_experiment(project, status):
    keeper = sha(project / "optimize.py")
    write_rows(project, ("e001", "baseline", keeper), ("e002", status, "cd" * 32))
    d = decision(run_hook("stop_gate.py", stop(project), project))
    assert d["decision"] == "block"
    assert status in d["reason"] and "e002" in d["reason"]
    assert "python harness/run_experiment.py --desc" in d["reason"]


def test_subagent_stop_uses_the_same_gate(project):
    write_rows(project, ("e001", "baseline", "00" * 32))
    d = decision(run_hook("stop_gate.py", subagent_stop(project, "model-optimizer", "agent-1"), project))
    assert d["decision"] == "block"


@pytest.mark.parametrize("agent_type", ["Explore", "general-purpose", "Plan"])
def test_subagent_stop_lets_other_subagents_go(project, agent_type):
    """Only the model-optimizer edits the candidate; a read-only helper must not be told to record it."""
    write_rows(project, ("e001", "baseline", "00" * 32))  # optimize.py unrecorded
    assert decision(run_hook("stop_gate.py", subagent_stop(project, agent_type, "agent-2"), project)) == {}


def test_block_counter_is_kept_per_agent(project):
    """Subagents send the main session_id: their stops must neither reset nor share the main count."""
    write_rows(project, ("e001", "baseline", "00" * 32))  # optimize.py never matches
    session = f"test-{uuid.uuid4()}"
    env = {"AUTO_OPTIM_STOP_MAX_BLOCKS": "2"}

    def main_stop(active):
        return decision(run_hook("stop_gate.py", stop(project, active, session), project, env=env))

    def sub_stop(active):
        return decision(run_hook("stop_gate.py", subagent_stop(project, "model-optimizer", "agent-7", active, session),
                                 project, env=env))

    assert main_stop(False)["decision"] == "block"
    assert main_stop(True)["decision"] == "block"
    assert sub_stop(False)["decision"] == "block"  # the subagent's first stop starts its own count...
    assert "systemMessage" in main_stop(True)  # ...and leaves the main one at 2: the main agent is let go
    assert sub_stop(True)["decision"] == "block"  # the subagent's second block in a row
    assert "systemMessage" in sub_stop(True)  # then it is let go too, not blocked on and on


def test_main_stop_passes_while_the_optimizer_subagent_runs(project):
    """The subagent owns the unrecorded edit: the main agent must not record or check it out now."""
    write_rows(project, ("e001", "baseline", "00" * 32))  # optimize.py unrecorded
    busy = stop(project, background_tasks=[background_task("running")])
    assert decision(run_hook("stop_gate.py", busy, project)) == {}
    experiment = stop(project, background_tasks=[background_task(
        "running", None, 'python harness/run_experiment.py --desc "bf16"')])
    assert decision(run_hook("stop_gate.py", experiment, project)) == {}


@pytest.mark.parametrize("task", [background_task("completed"), background_task("running", "Explore"),
                                  background_task("running", None, "sleep 100")])
def test_main_stop_still_gated_by_other_background_work(project, task):
    write_rows(project, ("e001", "baseline", "00" * 32))
    d = decision(run_hook("stop_gate.py", stop(project, background_tasks=[task]), project))
    assert d["decision"] == "block"


def test_stop_hook_active_is_honoured_no_endless_loop(project):
    write_rows(project, ("e001", "baseline", "00" * 32))  # optimize.py never matches
    session = f"test-{uuid.uuid4()}"
    env = {"AUTO_OPTIM_STOP_MAX_BLOCKS": "2"}
    assert decision(run_hook("stop_gate.py", stop(project, False, session), project, env=env))["decision"] == "block"
    assert decision(run_hook("stop_gate.py", stop(project, True, session), project, env=env))["decision"] == "block"
    d = decision(run_hook("stop_gate.py", stop(project, True, session), project, env=env))
    assert "decision" not in d and "not recorded" in d["systemMessage"]  # let go, person warned
    # a fresh prompt (stop_hook_active false) starts counting again
    assert decision(run_hook("stop_gate.py", stop(project, False, session), project, env=env))["decision"] == "block"


def test_settings_json_wires_the_hooks():
    s = json.loads((REPO / ".claude" / "settings.json").read_text())
    pre = s["hooks"]["PreToolUse"][0]
    assert set(pre["matcher"].split("|")) == {"Edit", "Write", "NotebookEdit", "Bash"}
    assert pre["hooks"][0]["type"] == "command" and "guard_frozen.py" in pre["hooks"][0]["command"]
    for event in ("Stop", "SubagentStop"):
        assert "stop_gate.py" in s["hooks"][event][0]["hooks"][0]["command"]
    agent = (REPO / ".claude" / "agents" / "model-optimizer.md").read_text()
    front = agent.split("---")[1]
    assert "name: model-optimizer" in front and "description:" in front
    tools = next(line for line in front.splitlines() if line.startswith("tools:"))
    assert "Write" not in tools and "NotebookEdit" not in tools
    assert (REPO / "CLAUDE.md").is_symlink() and os.readlink(REPO / "CLAUDE.md") == "AGENTS.md"


# The tools Claude Code 2.1.330 offers (the native Linux build, read from its API requests): a
# name outside this list in a matcher never matches, and in a subagent's tools it is dropped silently.
CLAUDE_CODE_TOOLS = {"Agent", "Bash", "Edit", "Read", "Write", "NotebookEdit", "WebFetch", "WebSearch", "Skill",
                     "ToolSearch", "ListAgents", "SendMessage", "TaskStop", "Monitor", "ScheduleWakeup", "Workflow",
                     "CronCreate", "CronDelete", "CronList", "EnterWorktree", "ExitWorktree"}


def test_hooks_and_subagent_name_only_real_tools():
    s = json.loads((REPO / ".claude" / "settings.json").read_text())
    for entry in s["hooks"]["PreToolUse"]:
        assert set(entry["matcher"].split("|")) <= CLAUDE_CODE_TOOLS, entry["matcher"]
    front = (REPO / ".claude" / "agents" / "model-optimizer.md").read_text().split("---")[1]
    tools = next(line for line in front.splitlines() if line.startswith("tools:")).split(":", 1)[1]
    assert {t.strip() for t in tools.split(",")} <= CLAUDE_CODE_TOOLS, tools
    for matcher in re.findall(r'matcher:\s*"([^"]+)"', front):
        assert set(matcher.split("|")) <= CLAUDE_CODE_TOOLS, matcher


def test_stop_with_no_record_compares_with_git(project):
    def git(*a):
        subprocess.run(["git", "-C", str(project), *a], check=True, capture_output=True)
    git("init", "-q")
    git("add", "optimize.py")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x")
    assert decision(run_hook("stop_gate.py", stop(project), project)) == {}
    (project / "optimize.py").write_text("# edited before any experiment\n")
    d = decision(run_hook("stop_gate.py", stop(project), project))
    assert d["decision"] == "block" and "no experiment is recorded yet" in d["reason"]
