"""The Claude Code hooks (agent/hooks/) fed the JSON Claude Code sends them.

Each hook runs as Claude Code runs it: a subprocess with one JSON object on stdin and
CLAUDE_PROJECT_DIR in its environment. Payload fields follow the hooks reference
(https://code.claude.com/docs/en/hooks): session_id, transcript_path, cwd, permission_mode,
hook_event_name, plus tool_name / tool_input / tool_use_id (PreToolUse) or stop_hook_active (Stop).
Decisions checked: PreToolUse refusal = exit 2 + reason on stderr; Stop refusal = exit 0 +
{"decision": "block", "reason": ...} on stdout.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "agent" / "hooks"
AGENT = REPO / "agent"  # policy.py
COLUMNS = ["exp", "commit", "timestamp", "desc", "status", "median_s", "spread_s", "psnr_db", "max_abs",
           "speedup_vs_fp32", "gpu", "preset", "weights", "frozen_hash", "candidate_sha", "versions"]


def run_hook(name: str, payload: dict, project: Path, *args: str, env: dict | None = None):
    e = {k: v for k, v in os.environ.items() if k != "AUTO_OPTIM_GOALS"}
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


# ---------------------------------------------------------------- guard_frozen: the subagent's edits

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


def test_main_agent_edits_are_left_to_the_deny_rules(project):
    """Frozen paths are refused by settings.json's deny rules (tests/test_claude_code_e2e.py), not here
    (but configuration names: test_configuration_is_not_edited_in_any_folder)."""
    r = run_hook("guard_frozen.py", tool(project, "Edit", {"file_path": str(project / "PROGRESS.md"),
                                                           "old_string": "a", "new_string": "b"}), project)
    assert r.returncode == 0 and r.stderr == ""


# ---------------------------------------------------------------- guard_frozen: the way out of the sandbox

def bash(project: Path, command, unsandboxed=True, cwd: Path | None = None) -> dict:
    payload = tool(project, "Bash", {"command": command, "description": "x", "dangerouslyDisableSandbox": unsandboxed})
    payload["cwd"] = str(cwd or project)
    return payload


@pytest.mark.parametrize("command", ["auto-optim-agent", "nvidia-smi", "nvidia-smi -L"])
def test_only_exact_strings_leave_the_sandbox(project, command):
    r = run_hook("guard_frozen.py", bash(project, command), project)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # from a subfolder too: the door ignores the cwd (the guard reads nothing but the string)
    assert run_hook("guard_frozen.py", bash(project, command, cwd=project / "harness"), project).returncode == 0


UNSANDBOXED_REFUSED = [
    # what Claude Code 2.1.330's own matcher let through for `Bash(auto-optim-agent)` (the e2e helper's
    # notes): a comment, spaces, quotes, a backslash, `command`, redirections that write
    "auto-optim-agent #x", "auto-optim-agent # comment", "auto-optim-agent\n#x", "  auto-optim-agent",
    "auto-optim-agent ", "auto-optim-agent\t", '"auto-optim-agent"', "\\auto-optim-agent", "command auto-optim-agent",
    "auto-optim-agent 2>&1", "auto-optim-agent < goals.json", "auto-optim-agent >| PROGRESS.md",
    "auto-optim-agent &> newfile.txt", "auto-optim-agent > /dev/null",
    # arguments, operators, a second line, look-alikes
    "auto-optim-agent --rebaseline", "auto-optim-agent -h", "auto-optim-agent; rm -rf harness", "auto-optim-agent\n",
    "auto-optim-agent && echo x > goals.json", "auto-optim-agent | tee results.tsv", "exec auto-optim-agent",
    "AUTO_OPTIM_GOALS=/tmp/g.json auto-optim-agent", "auto-optim-agent\u00a0", "auto\u2010optim-agent",
    "Auto-optim-agent", "auto-optim-agent{,x}", "./auto-optim-agent", "/tmp/auto-optim-agent", "auto-optim",
    "auto-optim run --desc x", "nvidia-smi  -L", "nvidia-smi -pm 1", "nvidia-smi -lgc 1980", "nvidia-smi -q",
    # the harness and the person's flags, in every spelling the old guard parsed
    "python harness/cli/run_experiment.py --desc x", "python harness/cli/run_experiment.py --desc steal#x --unsandboxed",
    "python harness/cli/run_experiment.py --desc [+-][a-]*", "python harness/cli/run_experiment.py --desc {x,--unsandboxed}",
    "python harness/cli/run_experiment.py --apply=forged.json", "python harness/cli/run_experiment.py --app forged.json",
    "python harness/cli/run_experiment.py --desc x --measure-only --record-out .claude/settings.json",
    "python harness/cli/wave.py candidates/a.py", "python harness/cli/verify.py", "python harness/decide/floor.py --verdict",
    "echo x > goals.json", "rm -rf harness", "bash -c 'auto-optim-agent'", "", " ",
]


def guard_module():
    """guard_frozen.py's functions in this process, for the long lists (main() runs as Claude Code runs it
    in the tests that pass a payload)."""
    spec = importlib.util.spec_from_file_location("guard_frozen", HOOKS / "guard_frozen.py")  # by location, as it runs
    guard_frozen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard_frozen)

    return guard_frozen


@pytest.mark.parametrize("command", UNSANDBOXED_REFUSED[:3] + ["python harness/cli/run_experiment.py --desc x#y --apply f"])
def test_anything_else_stays_in_the_sandbox(project, command):
    r = run_hook("guard_frozen.py", bash(project, command), project)
    assert r.returncode == 2, f"let out of the sandbox: {command!r}"
    assert r.stderr.startswith("guard_frozen: blocked.") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "`auto-optim-agent`" in r.stderr and "dangerouslyDisableSandbox: true" in r.stderr  # the way to measure


def test_every_other_command_stays_in_the_sandbox(project):
    guard = guard_module()
    for command in UNSANDBOXED_REFUSED:
        with pytest.raises(guard.Blocked, match="only these exact commands run"):
            guard.check_bash({"command": command, "dangerouslyDisableSandbox": True}, project)
    for command in guard.UNSANDBOXED:
        guard.check_bash({"command": command, "dangerouslyDisableSandbox": True}, project)


def test_an_odd_payload_stays_in_the_sandbox(project):
    """Any dangerouslyDisableSandbox but false (or absent) counts as outside; a command that is not the
    exact string, whatever its type, is refused."""
    guard = guard_module()
    for flag in (True, "true", 1, "false", "no", [], {}):
        for command in (None, ["auto-optim-agent"], 7, "auto-optim-agent --apply x", {"command": "auto-optim-agent"}):
            with pytest.raises(guard.Blocked):
                guard.check_bash({"command": command, "dangerouslyDisableSandbox": flag}, project)
    r = run_hook("guard_frozen.py", bash(project, ["auto-optim-agent"], unsandboxed="yes"), project)
    assert r.returncode == 2 and r.stderr.startswith("guard_frozen: blocked."), r.stderr


def venv_in(folder: Path) -> Path:
    """A virtual environment's layout in `folder`: bin/python3 linked to this interpreter, and a door
    script whose first line names it, as `pip install -e .` writes it."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python3").symlink_to(Path(sys.base_prefix) / "bin" / Path(sys.executable).resolve().name)
    door = folder / "bin" / "auto-optim-agent"
    door.write_text(f"#!{folder / 'bin' / 'python3'}\nimport sys\nfrom harness.cli.door import main\nsys.exit(main())\n")
    door.chmod(0o755)
    return folder / "bin"


def test_the_door_is_let_out_only_from_a_path_the_agent_cannot_write(project, tmp_path_factory):
    """A bare name is looked up in PATH: an environment in the project (the agent rewrites its
    scripts from the sandbox), an empty or relative PATH entry (the cwd, which the agent picks), or a
    door whose interpreter lies in the project would run the agent's code with the person's rights."""
    system = os.environ["PATH"]
    inside = venv_in(project / "env")
    outside = venv_in(tmp_path_factory.mktemp("venvs") / "auto-optim")
    for path, says in ((f"{inside}{os.pathsep}{system}", "inside the project"), (f"{os.pathsep}{system}", "empty entry"),
                       (f"bin{os.pathsep}{system}", "relative to the shell's folder")):
        r = run_hook("guard_frozen.py", bash(project, "auto-optim-agent"), project, env={"PATH": path})
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert run_hook("guard_frozen.py", bash(project, "auto-optim-agent"), project,
                    env={"PATH": f"{outside}{os.pathsep}{system}"}).returncode == 0
    (outside / "auto-optim-agent").write_text(f"#!{inside / 'python3'}\n")  # outside, but run by the project's python
    r = run_hook("guard_frozen.py", bash(project, "auto-optim-agent"), project, env={"PATH": f"{outside}{os.pathsep}{system}"})
    assert r.returncode == 2 and "inside the project" in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["echo x > goals.json", "sed -i s/a/b/ model/vae.py", "cat harness/cli/verify.py",
                                     "auto-optim-agent --apply forged.json", "python harness/cli/run_experiment.py --rebaseline"])
def test_sandboxed_commands_are_left_to_the_sandbox(project, command):
    """The OS refuses sandboxed writes to frozen paths (e2e test), the door refuses arguments and the
    person's program refuses Claude Code's tool: the hook does not read sandboxed commands at all."""
    for flag in (False, None):
        assert run_hook("guard_frozen.py", bash(project, command, unsandboxed=flag), project).returncode == 0


CONFIGURATION = ["CLAUDE.md", "sub/CLAUDE.md", "candidates/AGENTS.md", "candidates/claude.md", "CLAUDE.local.md",
                 ".gitignore", "candidates/.gitattributes", "deep/a/.gitignore", ".mcp.json",
                 ".claude/settings.local.json", "sub/.claude/settings.json", "targets/new/.git/config",
                 "/elsewhere/.claude/agents/x.md", "candidates\\.gitattributes"]


def test_configuration_is_not_edited_in_any_folder(project):
    """A name in the tool's structured path (no shell involved): git's and Claude Code's configuration
    and instructions, in any folder, even one made during the session (deny globs cover the file tools,
    literal deny rules the bash sandbox)."""
    guard = guard_module()
    for path in CONFIGURATION:
        target = path if path.startswith("/") else str(project / path)
        for subagent in (False, True):
            with pytest.raises(guard.Blocked, match="configuration"):
                guard.check_edit(target, subagent, project, project)
    for tool_name in ("Edit", "Write"):
        r = run_hook("guard_frozen.py", tool(project, tool_name, {"file_path": str(project / "sub" / "CLAUDE.md"),
                                                                   "content": "x"}), project)
        assert r.returncode == 2 and "configuration" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_agents_own_files_are_edited(project):
    guard = guard_module()
    for path in ("optimize.py", "PROGRESS.md", "request.json", "candidates/a.py", "notes/claude_ideas.md"):
        guard.check_edit(str(project / path), False, project, project)
    r = run_hook("guard_frozen.py", tool(project, "Write", {"file_path": str(project / "request.json"), "content": "{}"}),
                 project)
    assert r.returncode == 0, r.stderr


def test_other_tools_pass(project):
    r = run_hook("guard_frozen.py", tool(project, "Read", {"file_path": str(project / "harness" / "verify.py")}),
                 project)
    assert r.returncode == 0
    for name in ("Agent", "ToolSearch", "WebSearch", "TaskStop"):
        assert run_hook("guard_frozen.py", tool(project, name, {}), project).returncode == 0, name


@pytest.mark.parametrize("name", ["CronCreate", "EnterWorktree", "Monitor", "Workflow", "ScheduleWakeup",
                                  "NotebookEdit", "ListAgents", "mcp__github__create_pr",
                                  "SomeToolOfAFutureRelease"])
def test_tools_the_loop_does_not_use_are_refused(project, name):
    """Denied by default: a tool is let through only if the loop uses it (LOOP_TOOLS)."""
    r = run_hook("guard_frozen.py", tool(project, name, {"command": "echo hi"}), project)
    assert r.returncode == 2 and f"{name} is not a tool this loop uses" in r.stderr


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
    assert '{"run": "experiment", "desc": ' in d["reason"] and "`auto-optim-agent`" in d["reason"]
    assert "e001" in d["reason"] and "git show HEAD:optimize.py > optimize.py" in d["reason"]


def test_texts_name_the_default_targets_files_from_the_root(tmp_path):
    """The agent's Bash calls start at the project root: the gate's and the guard's commands name the
    default target's files from there (targets/t/optimize.py, targets/t/request.json), so each runs as written."""
    (tmp_path / "pyproject.toml").write_text('[tool.auto-optim]\ntarget = "t"\n')
    folder = tmp_path / "targets" / "t"
    folder.mkdir(parents=True)
    (folder / "goals.json").write_text(json.dumps({"candidate": "optimize.py"}))
    (folder / "optimize.py").write_text("# the keeper\n")
    write_rows(folder, ("e001", "baseline", sha(folder / "optimize.py")))
    (folder / "optimize.py").write_text("# an edit nobody measured\n")
    (folder / "candidates").mkdir()
    (folder / "candidates" / "a.py").write_text("# a variant\n")
    reason = decision(run_hook("stop_gate.py", stop(tmp_path), tmp_path))["reason"]
    assert "targets/t/optimize.py has changed" in reason and "write targets/t/request.json: " in reason
    assert "`git show HEAD:targets/t/optimize.py > targets/t/optimize.py`" in reason
    (folder / "optimize.py").write_text("# the keeper\n")
    reason = decision(run_hook("stop_gate.py", stop(tmp_path), tmp_path))["reason"]
    assert reason.startswith("targets/t/candidates/a.py: not measured yet")
    assert 'write targets/t/request.json: {"run": "wave", "candidates": ["candidates/a.py"]}' in reason
    r = run_hook("guard_frozen.py", tool(tmp_path, "Bash", {"command": "python x.py", "dangerouslyDisableSandbox": True}),
                 tmp_path)
    assert r.returncode == 2 and "Everything but targets/t/optimize.py, targets/t/candidates/, targets/t/PROGRESS.md and " \
        "targets/t/request.json is read-only" in r.stderr and "write targets/t/request.json " in r.stderr, r.stderr


def test_short_recorded_sha_prefix_counts(project):
    write_rows(project, ("e001", "baseline", sha(project / "optimize.py")[:16]))
    assert decision(run_hook("stop_gate.py", stop(project), project)) == {}


def test_stop_blocked_while_a_wave_variant_is_unmeasured(project):
    """A variant written to candidates/ must be measured (wave.py) or deleted before the turn ends."""
    write_rows(project, ("e001", "baseline", sha(project / "optimize.py")))
    (project / "candidates").mkdir()
    (project / "candidates" / "README.md").write_text("notes are not candidates\n")
    variant = project / "candidates" / "a.py"
    variant.write_text("def build_decoder(vae, z):\n    return vae.decode, {'v': 'a'}\n")
    out = json.loads(run_hook("stop_gate.py", stop(project), project).stdout)
    assert out["decision"] == "block" and '{"run": "wave", "candidates": ["candidates/a.py"]}' in out["reason"]
    write_rows(project, ("e001", "baseline", sha(project / "optimize.py")), ("e002", "revert", sha(variant)[:16]))
    assert run_hook("stop_gate.py", stop(project), project).stdout.strip() == ""


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
    assert '{"run": "experiment", "desc": ' in d["reason"] and "`auto-optim-agent`" in d["reason"]


@pytest.mark.parametrize("link", ["optimize.py", "candidates", "candidates/b.py"])
def test_stop_gate_reads_no_link(project, tmp_path_factory, link):
    """The candidate and the variants are read without following a link: a link to the signing key is a
    problem to fix, never a file hashed (and named in a reason) for the agent."""
    secret = tmp_path_factory.mktemp("key") / "record-key"
    secret.write_bytes(b"k" * 32)
    write_rows(project, ("e001", "baseline", sha(project / "optimize.py")))
    (project / "candidates").mkdir()
    (project / "candidates" / "a.py").write_text("# measured nowhere\n")
    if link == "candidates":
        os.rename(project / "candidates", secret.parent / "candidates")
        (project / "candidates").symlink_to(secret.parent / "candidates", target_is_directory=True)
    else:
        (project / link).unlink(missing_ok=True)
        (project / link).symlink_to(secret)
    d = decision(run_hook("stop_gate.py", stop(project), project))
    assert d["decision"] == "block" and "link" in d["reason"] and hashlib.sha256(b"k" * 32).hexdigest()[:12] not in d["reason"]


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


# A stand-in for harness.cli.run_experiment holding the checkout lock as records.lock_file does.
HOLDS_LOCK = """import fcntl, os, sys, time
f = open(os.path.join(sys.argv[1], "runs", "run_experiment.lock"), "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.seek(0); f.truncate(); f.write(f"pid {os.getpid()}, since now"); f.flush()
print("locked", flush=True)
time.sleep(60)
"""


def test_main_stop_passes_while_a_harness_run_holds_the_lock(project):
    """A background experiment is recognised by the harness's own lock (the pid it wrote), not by
    what a background command's text says."""
    write_rows(project, ("e001", "baseline", "00" * 32))  # optimize.py unrecorded
    (project / "runs").mkdir()
    # Its command line as a tool's child's ends (harness/start.py): the module's name last but its arguments.
    run = subprocess.Popen([sys.executable, "-c", HOLDS_LOCK, str(project), "harness.cli.run_experiment"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout.readline().strip() == "locked"
        assert decision(run_hook("stop_gate.py", stop(project), project)) == {}
    finally:
        run.kill()
        run.wait()
    # the run is over (its pid is gone): gated again, and a command's text alone never counts
    fake = stop(project, background_tasks=[background_task("running", None, 'python -P -m harness.cli.run_experiment --desc x')])
    assert decision(run_hook("stop_gate.py", fake, project))["decision"] == "block"
    (project / "runs" / "run_experiment.lock").write_text(f"pid {os.getpid()}, since now")  # alive, not the harness
    assert decision(run_hook("stop_gate.py", stop(project), project))["decision"] == "block"
    # the harness's command line alone, without the lock held (a pid written earlier, reused)
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "harness.cli.run_experiment"])
    try:
        (project / "runs" / "run_experiment.lock").write_text(f"pid {run.pid}, since now")
        assert decision(run_hook("stop_gate.py", stop(project), project))["decision"] == "block"
    finally:
        run.kill()
        run.wait()


@pytest.mark.parametrize("task", [background_task("completed"), background_task("running", "Explore"),
                                  background_task("running", None, "sleep 100"),
                                  background_task("running", None, "sleep 100 # harness.cli.run_experiment")])
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


def test_refusals_before_a_turn_may_end_default_to_the_cli_cap(project):
    """8 refusals of the same problem in a row (Claude Code's own cap), and a new problem (the agent
    did something: another experiment, another edit) starts the count again."""
    write_rows(project, ("e001", "baseline", "00" * 32))
    session = f"test-{uuid.uuid4()}"
    said = [decision(run_hook("stop_gate.py", stop(project, i > 0, session), project)) for i in range(8)]
    assert all(d.get("decision") == "block" for d in said)
    (project / "optimize.py").write_text("# another edit\n")  # a new problem: counted from 1
    assert decision(run_hook("stop_gate.py", stop(project, True, session), project))["decision"] == "block"
    (project / "optimize.py").write_text("def build_decoder(vae, z):\n    return vae.decode, {}\n")
    for _ in range(8):  # the first problem again: a new count
        assert decision(run_hook("stop_gate.py", stop(project, True, session), project))["decision"] == "block"
    assert "systemMessage" in decision(run_hook("stop_gate.py", stop(project, True, session), project))


def test_settings_json_wires_the_hooks():
    s = json.loads((REPO / ".claude" / "settings.json").read_text())
    pre = s["hooks"]["PreToolUse"][0]
    assert pre["matcher"] == "*"  # every tool: the guard denies the ones the loop does not use
    # an absolute interpreter in isolated mode: nothing on PATH or in the project runs in a hook
    hooks = [pre["hooks"][0]] + [s["hooks"][e][0]["hooks"][0] for e in ("Stop", "SubagentStop")]
    assert all(h["type"] == "command" and h["command"].startswith("/usr/bin/python3 -I ") for h in hooks)
    assert "guard_frozen.py" in pre["hooks"][0]["command"]
    for event in ("Stop", "SubagentStop"):
        assert "stop_gate.py" in s["hooks"][event][0]["hooks"][0]["command"]
    agent = (REPO / ".claude" / "agents" / "model-optimizer.md").read_text()
    front = agent.split("---")[1]
    assert "name: model-optimizer" in front and "description:" in front
    tools = next(line for line in front.splitlines() if line.startswith("tools:"))
    assert "Write" not in tools and "NotebookEdit" not in tools
    assert 'command: /usr/bin/python3 -I "$CLAUDE_PROJECT_DIR/agent/hooks/guard_frozen.py"' in front
    assert (REPO / "CLAUDE.md").is_symlink() and os.readlink(REPO / "CLAUDE.md") == "AGENTS.md"


def test_settings_json_denies_every_protected_path_and_requires_the_sandbox():
    """Deny rules refuse the file tools and, with the sandbox on, every shell write (bubblewrap):
    for every path the harness writes or trusts, of every target (_hooklib.protected_paths)."""
    from harness.paths import agent_policy
    protected_paths = agent_policy().protected_paths
    s = json.loads((REPO / ".claude" / "settings.json").read_text())
    deny = set(s["permissions"]["deny"])
    paths = protected_paths(REPO)
    assert {"targets/llm-decode/goals.json", "targets/llm-decode/llm", "targets/wan-vae/records", "AGENTS.md", ".venv",
            "targets/wan-vae/progress", "targets/llm-decode/progress", "targets/wan-vae/integrations",
            "targets/wan-vae/plans", "targets/llm-decode/plans"} <= set(paths)
    assert "targets/wan-vae/integrations/split_decode.py" in paths  # goals.json's "frozen"
    assert {".gitignore", ".gitattributes", ".mcp.json", "targets/llm-decode/.gitignore", "targets/llm-decode/CLAUDE.md",
            "targets/llm-decode/.claude", "targets/llm-decode/.git", "pyproject.toml"} <= set(paths)
    for name in paths:  # denied by a rule of its own, or of a folder it is in
        above = [name.rsplit("/", k)[0] for k in range(name.count("/") + 1)]
        assert ({f"Edit(/{name})"} | {f"Edit(/{a}/**)" for a in above}) & deny, name
    sandbox = s["sandbox"]
    assert sandbox["enabled"] is True and sandbox["failIfUnavailable"] is True  # no silent unsandboxed start
    # the door leaves the sandbox by dangerouslyDisableSandbox, approved by exact rules only (no `:*`)
    assert sandbox["allowUnsandboxedCommands"] is True and "excludedCommands" not in sandbox
    assert {r for r in s["permissions"]["allow"] if r.startswith("Bash(")} == {
        "Bash(auto-optim-agent)", "Bash(nvidia-smi)", "Bash(nvidia-smi -L)"}


def test_settings_json_hides_every_targets_inputs_and_references():
    """The benchmark input's secret seed, the references and the pool: read only by the harness."""
    from harness.paths import agent_policy
    secret_paths = agent_policy().secret_paths
    deny = set(json.loads((REPO / ".claude" / "settings.json").read_text())["permissions"]["deny"])
    assert {"targets/wan-vae/assets", "targets/llm-decode/assets"} <= set(secret_paths(REPO))
    for name in secret_paths(REPO):
        assert f"Read(/{name}/**)" in deny, name


def test_settings_json_hides_the_signing_key():
    """The key that signs records (harness/ledger/signing.py) is unreadable to the sandboxed shell and the Read tool."""
    from harness.ledger import signing
    s = json.loads((REPO / ".claude" / "settings.json").read_text())
    default = "~/" + (Path.home() / ".config" / "auto-optim").relative_to(Path.home()).as_posix()
    assert signing.key_dir() != Path.home() / ".config" / "auto-optim" or True  # tests use their own folder
    assert s["sandbox"]["filesystem"]["denyRead"] == [default]
    assert f"Read({default}/**)" in s["permissions"]["deny"]


# The tools Claude Code 2.1.330 offers (the native Linux build, read from its API requests): a
# name outside this list in a matcher never matches, and in a subagent's tools it is dropped silently.
CLAUDE_CODE_TOOLS = {"Agent", "Bash", "Edit", "Read", "Write", "NotebookEdit", "WebFetch", "WebSearch", "Skill",
                     "ToolSearch", "ListAgents", "SendMessage", "TaskStop", "Monitor", "ScheduleWakeup", "Workflow",
                     "CronCreate", "CronDelete", "CronList", "EnterWorktree", "ExitWorktree"}


def test_hooks_and_subagent_name_only_real_tools():
    s = json.loads((REPO / ".claude" / "settings.json").read_text())
    for entry in s["hooks"]["PreToolUse"]:
        assert entry["matcher"] == "*" or set(entry["matcher"].split("|")) <= CLAUDE_CODE_TOOLS, entry["matcher"]
    denied_tools = {r for r in s["permissions"]["deny"] if "(" not in r}
    assert denied_tools <= CLAUDE_CODE_TOOLS
    assert {"CronCreate", "EnterWorktree", "Monitor", "Workflow"} <= denied_tools
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
