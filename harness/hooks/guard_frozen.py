#!/usr/bin/env python3
"""PreToolUse hook: the one way out of Claude Code's sandbox is a plain harness command.

The frozen files (harness/, model/, goals.json, assets/, results.tsv, leaderboard.md, .claude/, and
.git/ so that only run_experiment commits) are protected by Claude Code itself, set up in
.claude/settings.json: permission deny rules `Edit(/harness/**)`... refuse the file tools, and the
same rules make the Bash sandbox (bubblewrap) mount those paths read-only for every shell command.
Two things are left to this hook:
  - Bash calls with `dangerouslyDisableSandbox: true` (the harness must run outside the sandbox:
    inside, /dev has no GPU and results.tsv is read-only). Allowed only for one plain command at
    the project root: `python harness/{run_experiment,wave,verify,bench,profile}.py ARGS` (no
    `--rebaseline`: a person's decision) or a read-only `nvidia-smi`; no operators, redirections,
    `$`, backticks or newlines that would run something else unsandboxed; and only while nothing
    the sandboxed agent wrote at the root can be imported by the harness in place of a real module
    (harness/_common puts the root first on sys.path, so a planted torch.py would run unsandboxed).
    A harness command asked for inside the sandbox is refused with the way to run it.
  - Edit / Write / NotebookEdit by the model-optimizer subagent (payload agent_type
    "model-optimizer", or this script run with --only-candidate from the subagent's frontmatter):
    the candidate file (goals.json "candidate", optimize.py) only. Deny rules cannot tell agents apart.

A refusal is exit code 2 with the reason on stderr (Claude Code blocks the call and shows Claude
the reason). Checked against Claude Code 2.1.330 (tests/test_claude_code_e2e.py).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _hooklib import OPTIMIZER_AGENT, candidate_name, project_root, read_payload  # noqa: E402

# The file tools of Claude Code 2.1.330 (MultiEdit is gone; Grep and Glob are not tools in native builds).
EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
HARNESS_SCRIPTS = {"run_experiment.py", "wave.py", "verify.py", "bench.py", "profile.py"}
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
        if tokens[1][len("harness/"):] in HARNESS_SCRIPTS:
            return tokens[1]
    return None


def rebaselines(tokens: list[str]) -> bool:
    """`--rebaseline`, or an abbreviation argparse would take for it."""
    return any(len(t) > 4 and "--rebaseline".startswith(t.split("=")[0]) for t in tokens)


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
    if not harness_script(tokens):
        raise Blocked("only the harness (python harness/run_experiment.py, wave.py, verify.py, bench.py, profile.py) and "
                      "nvidia-smi run outside the sandbox; everything else runs inside it.")
    if rebaselines(tokens):
        raise Blocked("`run_experiment.py --rebaseline` accepts changed frozen files; only a person may run it.")
    planted = planted_modules(root)
    if planted:
        raise Blocked(f"the project root holds {', '.join(planted)}, which the harness could import in place of a "
                      "real module; delete it (scratch files belong in $TMPDIR) and run the harness again.")


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
        if tool == "Bash":
            check_bash(tool_input, cwd, root)
        elif tool in EDIT_TOOLS and subagent:
            check_subagent_edit(str(tool_input.get(EDIT_TOOLS[tool]) or ""), cwd, root)
    except Blocked as e:
        print(f"guard_frozen: blocked. {e} The frozen files (harness/, model/, goals.json, assets/, results.tsv, "
              "leaderboard.md, .claude/) are read-only for the agent (AGENTS.md): edit only optimize.py and measure "
              f"it with the harness. {HOW} If a frozen file looks wrong, stop and tell the person.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
