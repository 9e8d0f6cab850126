#!/usr/bin/env python3
"""PreToolUse hook: nothing leaves Claude Code's sandbox but a few fixed strings, and nothing is parsed.

The protected files (harness/, goals.json, records/, .claude/, ... for every target:
agent/policy.py) are protected by Claude Code itself, from .claude/settings.json: deny rules
refuse the file tools, and the same rules make the Bash sandbox (bubblewrap) mount them read-only.
What is left to this hook:
  - Any tool not in LOOP_TOOLS is refused: a tool a later Claude Code adds is denied by default.
  - A Bash call with `dangerouslyDisableSandbox` (anything but false) runs outside the sandbox, with
    the person's rights. It is allowed only when its command is exactly one of policy.UNSANDBOXED:
    `auto-optim-agent` (the agent's door, harness/cli/door.py: it takes no argument and reads what to do
    from request.json), `nvidia-smi` or `nvidia-smi -L`. String equality on the raw command, not a
    parse: a comment, a quote, a brace, a glob, a redirection, a second line or one more space is
    another string, refused. (Claude Code's own matcher normalises a command before it compares it
    with an allow rule: it let `auto-optim-agent >| PROGRESS.md` and `auto-optim-agent #x` run; this
    equality is what keeps them in.) Inside the sandbox the OS is the wall, and the hook reads
    nothing of the command.
  - Edit / Write / NotebookEdit of configuration in any folder (policy.config_name: .gitignore,
    .gitattributes, .mcp.json, CLAUDE.md, AGENTS.md, CLAUDE.local.md, anything under .claude/ or .git/),
    by any agent: a name compared in the tool's structured path, no shell involved. (Deny rules with
    globs cover the file tools too; this also holds for a folder made during the session.)
  - Edit / Write / NotebookEdit by the model-optimizer subagent (payload agent_type
    "model-optimizer", or this script run with --only-candidate from the subagent's frontmatter):
    the candidate file (goals.json "candidate", optimize.py) only. Deny rules cannot tell agents apart.

A bare `auto-optim-agent` is looked up by bash in the person's PATH (functions and aliases first):
safe because a Bash call cannot change a later call's environment (each starts from Claude Code's
snapshot of the person's shell, under ~/.claude, read-only in the sandbox; measured with 2.1.330,
tests/test_claude_code_e2e.py) and nothing but these strings runs unsandboxed, as long as PATH holds
no folder the agent can write. So before letting one out, the hook checks the PATH Claude Code
runs with (path_problem: no empty or relative entry, none inside the project) and that the program
found there, and the interpreter its first line names, lie outside the project (a virtual
environment made in the project is the agent's to rewrite).

Claude Code runs it as `/usr/bin/python3 -I ...` (settings.json): an absolute interpreter, in
isolated mode, so nothing on PATH or in the project is imported into the hook itself.
A refusal is exit code 2 with the reason on stderr, one line (Claude Code blocks the call and
shows Claude the reason).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import importlib.util  # noqa: E402


def _hooklib():
    """agent/hooks/_hooklib.py, beside this file, by its location (a `python3 -I` script has no
    folder of its own on sys.path, and edits none)."""
    spec = importlib.util.spec_from_file_location("_hooklib", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                          "_hooklib.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["_hooklib"] = module
    spec.loader.exec_module(module)
    return module


_lib = _hooklib()
OPTIMIZER_AGENT, candidate_name, project_root, read_payload, shown, target_root = (
    _lib.OPTIMIZER_AGENT, _lib.candidate_name, _lib.project_root, _lib.read_payload, _lib.shown, _lib.target_root)
UNSANDBOXED, config_name = _lib.policy.UNSANDBOXED, _lib.policy.config_name

# The file tools of Claude Code 2.1.330 (MultiEdit is gone; Grep and Glob are not tools in native builds).
EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
# Every tool the loop uses (main agent, model-optimizer, the built-in Explore): the rest is refused,
# a tool that a later Claude Code adds, an MCP server's, and ones 2.1.330 has that the settings do
# not name (ListAgents).
LOOP_TOOLS = {"Read", "Edit", "Write", "Bash", "Agent", "Task", "ToolSearch", "WebSearch", "WebFetch", "TaskStop",
              "TaskOutput", "SendMessage", "TodoWrite", "Glob", "Grep", "ReportFindings"}
FORMS = ", ".join(f"`{c}`" for c in UNSANDBOXED)
# What the agent may write and how it measures, named from the project root (_hooklib.shown).
HOW = ("Everything but {files} is read-only for the agent (AGENTS.md). To measure, write {request} (AGENTS.md) and "
       "run exactly `auto-optim-agent` with dangerouslyDisableSandbox: true.")


class Blocked(Exception):
    pass


def inside(path: str, root: Path) -> bool:
    return any(Path(p).is_relative_to(r) for p in (os.path.abspath(path), os.path.realpath(path))
               for r in (root, Path(os.path.realpath(root))))


def path_problem(program: str, root: Path) -> str | None:
    """Why bash might not find the person's `program` (see the module docstring), or None."""
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isabs(entry):
            return f"PATH holds {entry or 'an empty entry'!r}, relative to the shell's folder, which the agent chooses"
        if inside(entry, root):
            return f"PATH holds {entry}, inside the project, where the agent can write"
    found = shutil.which(program)
    if found is None:
        return None  # bash finds nothing either: the call fails, nothing runs
    try:
        with open(found, "rb") as f:
            first = f.readline(300)
    except OSError:
        first = b""
    interpreter = first[2:].split()[0].decode(errors="replace") if first.startswith(b"#!") and first[2:].split() else ""
    for what in (found, interpreter):
        if what and inside(what, root):
            return f"{program} runs {what}, inside the project, where the agent can write"
    return None


def check_bash(tool_input: dict, root: Path) -> None:
    if tool_input.get("dangerouslyDisableSandbox") in (None, False):
        return  # inside the sandbox: the OS walls it off
    command = tool_input.get("command")
    if command not in UNSANDBOXED:
        raise Blocked(f"outside the sandbox only these exact commands run: {FORMS} (nothing added, not even a "
                      f"space), not {str(command)[:120]!r}.")
    why = path_problem(command.split()[0], root)
    if why:
        raise Blocked(f"{why}: a person makes the environment outside the project (README, Quickstart) and starts "
                      "claude from it.")


def check_edit(target: str, subagent: bool, cwd: Path, root: Path) -> None:
    name = config_name(target)
    if name is not None:
        raise Blocked(f"{target} is configuration ({name}) that only the person writes.")
    if subagent:
        folder = target_root(root)
        cand = candidate_name(folder)
        path = Path(target) if os.path.isabs(target) else cwd / target
        if os.path.abspath(path) != os.path.abspath(folder / cand):
            raise Blocked(f"the {OPTIMIZER_AGENT} subagent may edit only {shown(root, folder, cand)}, not {target}.")


def main() -> int:
    payload = read_payload()
    root = project_root(payload)
    cwd = Path(os.path.abspath(payload.get("cwd") or root))
    tool = payload.get("tool_name", "")
    tool_input = payload.get("tool_input") or {}
    tool_input = tool_input if isinstance(tool_input, dict) else {}
    subagent = "--only-candidate" in sys.argv[1:] or payload.get("agent_type") == OPTIMIZER_AGENT
    try:
        if tool not in LOOP_TOOLS:
            raise Blocked(f"{tool} is not a tool this loop uses (agent/hooks/guard_frozen.py LOOP_TOOLS).")
        if tool == "Bash":
            check_bash(tool_input, root)
        elif tool in EDIT_TOOLS:
            check_edit(str(tool_input.get(EDIT_TOOLS[tool]) or ""), subagent, cwd, root)
    except Blocked as e:
        folder = target_root(root)
        files = ", ".join([shown(root, folder, candidate_name(folder)), shown(root, folder, "candidates") + "/",
                           shown(root, folder, "PROGRESS.md")])
        how = HOW.format(files=f"{files} and {shown(root, folder, 'request.json')}",
                         request=shown(root, folder, "request.json"))
        print(f"guard_frozen: blocked. {e} {how} If a frozen file looks wrong, stop and tell the person.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
