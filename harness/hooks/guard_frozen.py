#!/usr/bin/env python3
"""PreToolUse hook: the one way out of Claude Code's sandbox is a plain harness command.

The protected files (harness/, model/, goals.json, assets/, results.tsv, leaderboard.md, records/,
runs/, profiles/, quality/, progress.png, AGENTS.md, program.md, .claude/, a venv in the project,
the same for every target under targets/, and .git/ so that only run_experiment commits) are
protected by Claude Code itself, set up in .claude/settings.json: permission deny rules
`Edit(/harness/**)`... refuse the file tools, and the same rules make the Bash sandbox (bubblewrap)
mount those paths read-only for every shell command. The tools the loop does not use
(CronCreate, EnterWorktree, Monitor, Workflow, ...) are denied there by name. What is left to this hook:
  - Any tool not in LOOP_TOOLS is refused: a tool a later Claude Code adds is denied by default.
  - Bash calls with `dangerouslyDisableSandbox: true` (the harness must run outside the sandbox:
    inside, /dev has no GPU and results.tsv is read-only). Allowed only for one plain command at
    the project root: `python harness/{run_experiment,wave,verify,bench,profile,floor}.py ARGS`
    with ARGS from AGENT_OPTIONS alone (an allowlist: --apply, --record-out, --measure-only,
    --unsandboxed, --rebaseline, --out... are the person's), or a read-only `nvidia-smi`; no
    operators, redirections, `$`, backticks or newlines that would run something else
    unsandboxed; only with an interpreter that lies outside the project (a venv the agent can
    write would run its code unsandboxed); and only while nothing the sandboxed agent wrote at the
    root can be imported by the harness in place of a real module (harness/__init__.py puts the root
    on sys.path, so a planted torch.py would run unsandboxed). A harness command asked for inside
    the sandbox is refused with the way to run it.
  - Edit / Write / NotebookEdit by the model-optimizer subagent (payload agent_type
    "model-optimizer", or this script run with --only-candidate from the subagent's frontmatter):
    the candidate file (goals.json "candidate", optimize.py) only. Deny rules cannot tell agents apart.

Claude Code runs it as `/usr/bin/python3 -I ...` (settings.json): an absolute interpreter, in
isolated mode, so nothing on PATH or in the project is imported into the hook itself.
A refusal is exit code 2 with the reason on stderr, one line (Claude Code blocks the call and
shows Claude the reason). Checked against Claude Code 2.1.330 (tests/test_claude_code_e2e.py).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _hooklib import CANDIDATES_DIR, OPTIMIZER_AGENT, candidate_name, project_root, read_payload  # noqa: E402

# The file tools of Claude Code 2.1.330 (MultiEdit is gone; Grep and Glob are not tools in native builds).
EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
# Every tool the loop uses (main agent, model-optimizer, the built-in Explore): the rest is refused,
# a tool that a later Claude Code adds, an MCP server's, and ones 2.1.330 has that the settings do
# not name (ListAgents).
LOOP_TOOLS = {"Read", "Edit", "Write", "Bash", "Agent", "Task", "ToolSearch", "WebSearch", "WebFetch", "TaskStop",
              "TaskOutput", "SendMessage", "TodoWrite", "Glob", "Grep", "ReportFindings"}
# What the agent may pass to each harness tool: option -> takes a value. Everything else (--apply,
# --record-out, --measure-only, --unsandboxed, --rebaseline, --out, --frames-out, --force...)
# writes where it names, trusts a record, or skips a protection: the person's.
RUN = {"--desc": True, "--preset": True, "--no-profile": False, "--device": True, "--timeout": True}
READ = {"--preset": True, "--device": True}
AGENT_OPTIONS: dict[str, dict[str, bool]] = {
    "run_experiment.py": RUN,
    "wave.py": {**RUN, "--repeat": True, "--gpus": True, "--member-wall": True},
    "verify.py": {**READ, "--candidate": True},
    "bench.py": {**READ, "--candidate": True, "--runs": True, "--baseline": False},
    "profile.py": READ,  # it writes profiles/<candidate stem>.md: no --candidate, no --out
    "floor.py": {**READ, "--verdict": False},
}
PERSON_ONLY = ("--apply", "--record-out", "--measure-only", "--unsandboxed", "--rebaseline")
WAVE_MEMBER = re.compile(r"^candidates/[\w.-]+\.py$")  # wave.py's positional files, verify/bench's --candidate
PYTHON = re.compile(r"^python3?$")
OPERATOR = re.compile(r"^[();<>|&]+$")
NVIDIA_SMI_READS = re.compile(r"^(-L|-q|--query-gpu=[\w.,]+|--format=[\w,]+)$")
IMPORTABLE_FILE = re.compile(r"\.(py|pyc|pyw|so|pth)$")
HOW = ('Run the harness as one plain command at the project root with dangerouslyDisableSandbox: true, '
       'e.g. python harness/run_experiment.py --desc "what and why" (no pipes, redirections, $ or backticks; '
       'read its output as it comes).')


class Blocked(Exception):
    pass


def harness_script(tokens: list[str]) -> str | None:
    """The harness script a command runs (`python harness/X.py ...`), else None."""
    if len(tokens) >= 2 and PYTHON.match(tokens[0]) and tokens[1].startswith("harness/"):
        if tokens[1][len("harness/"):] in AGENT_OPTIONS:
            return tokens[1]
    return None


def check_arguments(script: str, args: list[str]) -> None:
    """Only the options AGENT_OPTIONS gives this script, spelled out (no abbreviations argparse
    would widen), each value a word of its own that is not an option; positionals only for a wave."""
    allowed = AGENT_OPTIONS[script]
    i = 0
    while i < len(args):
        word = args[i]
        name, eq, _ = word.partition("=")
        if word in ("-h", "--help"):
            pass
        elif name in allowed:
            if allowed[name] and not eq:
                i += 1
                if i >= len(args) or args[i].startswith("-"):
                    raise Blocked(f"`{name}` needs a value of its own.")
            elif eq and not allowed[name]:
                raise Blocked(f"`{name}` takes no value.")
            value = word.partition("=")[2] if eq else args[i]
            if name == "--candidate" and not WAVE_MEMBER.match(value):
                # the harness reads that file outside the sandbox: a candidate, not the signing key
                raise Blocked(f"`--candidate` names a file in candidates/ (candidates/NAME.py), not `{value}`.")
        elif word.startswith("-"):
            person = next((f for f in PERSON_ONLY if len(name) > 4 and f.startswith(name)), None)
            if person:
                raise Blocked(f"`{script} {person}` is the person's (README, 'Running it with Claude Code'): the agent "
                              "runs experiments, a person applies records, re-baselines and runs unsandboxed.")
            raise Blocked(f"`{script}` takes only {', '.join(allowed)} from the agent, not `{word}`.")
        elif not (script == "wave.py" and WAVE_MEMBER.match(word)):
            raise Blocked(f"`{script}` takes no argument `{word}` from the agent"
                          + (" (a wave's files are candidates/NAME.py)." if script == "wave.py" else "."))
        i += 1


def interpreter_problem(name: str, root: Path) -> str | None:
    """Why the `python` this command would start may not run the harness: it, its environment
    (sys.prefix, read with -I -S so nothing of it is imported) or its link target lies in the
    project, where the sandboxed agent can write (a .pth file, sitecustomize.py, bin/python)."""
    exe = shutil.which(name)
    if exe is None:
        return (f"`{name}` is not on Claude Code's PATH: start claude with the Python environment "
                "(outside the project) activated.")
    p = subprocess.run([exe, "-I", "-S", "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                       timeout=10)
    for path in (exe, os.path.realpath(exe), p.stdout.strip() if p.returncode == 0 else exe):
        if Path(os.path.abspath(path)).is_relative_to(root.resolve()) or Path(path).is_relative_to(root):
            return (f"`{name}` is {exe}, whose Python ({path}) is inside the project, where the agent can write: "
                    "a person makes the virtual environment outside it (README, Quickstart).")
    return None


def words(command: str) -> list[str]:
    """shlex words, operators as words of their own; [] if the command does not parse."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return []


def planted_modules(root: Path) -> list[str]:
    """Root entries Python could import ahead of site-packages, other than the candidate, that git
    does not track at HEAD (without git, every such entry)."""
    p = subprocess.run(["git", "-C", str(root), "ls-tree", "--name-only", "HEAD"], capture_output=True, text=True,
                       timeout=10)
    known = (set(p.stdout.split()) if p.returncode == 0 else set()) | {candidate_name(root)}
    found = []
    for entry in sorted(os.listdir(root)):
        path = root / entry
        importable = (IMPORTABLE_FILE.search(entry) and path.is_file()) or (path / "__init__.py").exists()
        if importable and entry not in known:
            found.append(entry)
    return found


def check_unsandboxed(command: str, cwd: Path, root: Path) -> None:
    if any(c in command for c in "\n\r$`"):
        raise Blocked("an unsandboxed command may not hold newlines, `$` or backticks.")
    tokens = words(command)
    if not tokens or any(OPERATOR.match(t) for t in tokens):
        raise Blocked("an unsandboxed command must be one plain command: no ; && || | & ( ) < >.")
    if os.path.realpath(cwd) != os.path.realpath(root):
        raise Blocked(f"the harness runs outside the sandbox only from the project root {root}, not {cwd}.")
    if tokens[0] == "nvidia-smi":
        if all(NVIDIA_SMI_READS.match(t) for t in tokens[1:]):
            return
        raise Blocked("outside the sandbox nvidia-smi may only read (-L, -q, --query-gpu=, --format=).")
    script = harness_script(tokens)
    if not script:
        raise Blocked("only the harness (python harness/run_experiment.py, wave.py, verify.py, bench.py, profile.py, "
                      "floor.py) and nvidia-smi run outside the sandbox; everything else runs inside it.")
    check_arguments(script[len("harness/"):], tokens[2:])
    bad_python = interpreter_problem(tokens[0], root)
    if bad_python:
        raise Blocked(bad_python)
    planted = planted_modules(root)
    if planted:
        raise Blocked(f"the project root holds {', '.join(planted)}, which the harness could import in place of a "
                      "real module; delete it (scratch files belong in $TMPDIR) and run the harness again.")
    linked = linked_sources(root)
    if linked:
        raise Blocked(f"{', '.join(linked)} must be a file of its own, not a link: the harness reads it outside the "
                      "sandbox (and records it).")


def linked_sources(root: Path) -> list[str]:
    """The files the harness would read as candidate source (the candidate, candidates/*.py) that
    are symlinks or lie elsewhere: a link to a file the agent may not read (the signing key) would be
    read, hashed and reported by the harness, outside the sandbox."""
    real_root = Path(os.path.realpath(root))
    files = [root / candidate_name(root), *sorted((root / CANDIDATES_DIR).glob("*"))]
    return [str(f.relative_to(root)) for f in files
            if f.is_symlink() or not Path(os.path.realpath(f)).is_relative_to(real_root)]


def check_bash(tool_input: dict, cwd: Path, root: Path) -> None:
    command = str(tool_input.get("command") or "")
    if tool_input.get("dangerouslyDisableSandbox"):
        check_unsandboxed(command, cwd, root)
    elif harness_script(words(command)):
        raise Blocked("inside the sandbox the harness cannot reach the GPU or write results.tsv.")


def check_subagent_edit(target: str, cwd: Path, root: Path) -> None:
    cand = candidate_name(root)
    path = Path(target) if os.path.isabs(target) else cwd / target
    if os.path.realpath(path) != os.path.realpath(root / cand):
        raise Blocked(f"the {OPTIMIZER_AGENT} subagent may edit only {cand}, not {target}.")


def main() -> int:
    payload = read_payload()
    root = project_root(payload)
    cwd = Path(os.path.abspath(payload.get("cwd") or root))
    tool = payload.get("tool_name", "")
    tool_input = payload.get("tool_input") or {}
    subagent = "--only-candidate" in sys.argv[1:] or payload.get("agent_type") == OPTIMIZER_AGENT
    try:
        if tool not in LOOP_TOOLS:
            raise Blocked(f"{tool} is not a tool this loop uses (harness/hooks/guard_frozen.py LOOP_TOOLS).")
        if tool == "Bash":
            check_bash(tool_input, cwd, root)
        elif tool in EDIT_TOOLS and subagent:
            check_subagent_edit(str(tool_input.get(EDIT_TOOLS[tool]) or ""), cwd, root)
    except Blocked as e:
        print(f"guard_frozen: blocked. {e} Everything but optimize.py, candidates/ and PROGRESS.md is read-only for "
              f"the agent (AGENTS.md): edit only optimize.py and measure it with the harness. {HOW} If a frozen file "
              "looks wrong, stop and tell the person.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
