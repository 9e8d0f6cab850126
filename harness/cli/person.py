"""`auto-optim`: the person's program, with the powers the agent never has.

Usage:
    auto-optim run --desc "what and why" [--preset P] [--candidate F] [--rebaseline] [--unsandboxed] ...
    auto-optim measure --desc "..." --record-out REC.json [--best-median S] ...   (a GPU machine: record nothing here)
    auto-optim apply REC.json                    (record what `measure` wrote, signed with your key)
    auto-optim wave|verify|bench|profile|floor|prepare|records ARGS   (the tools, with their own options)
    auto-optim settings [--check]                (write .claude/settings.json from agent/policy.py)
    auto-optim new-target NAME [--dir DIR]       (scaffold targets/NAME: harness/cli/new_target.py)

Each verb is the tool of the same job (TOOLS: `run`, `measure` and `apply` are harness/cli/run_experiment.py,
the others harness/cli/<verb>.py, `floor` harness/decide/floor.py, `records`
harness/ledger/cli.py); `python -P -m MODULE` (the package installed; -P keeps the working folder off sys.path)
stays an alias for scripts and GPU plans, harness/start.py for a wave's members and the tests. The agent has its own door, `auto-optim-agent` (harness/cli/door.py),
which takes no argument and has none of these powers: applying a record, measuring into a file,
re-baselining, running a candidate unsandboxed.

Defence in depth (the walls are Claude Code's sandbox and the PreToolUse guard, which lets nothing
but the door's exact name out of the sandbox):
  - It refuses, one line, exit 2, when it finds itself started by Claude Code's tool
    (started_by_claude_code): CLAUDECODE, CLAUDE_CODE_ENTRYPOINT or SANDBOX_RUNTIME set (Claude Code
    2.1.330 sets the first two in every Bash call, the third in sandboxed ones), a `claude` program
    among its ancestors (an unsandboxed Bash call's parent shell is the claude process's child), or
    bubblewrap as its PID namespace's first process (the sandbox's). The aliases refuse the same
    way when given a power (refuse_agent).
  - With a terminal on stdin it names each power asked for and waits for "yes".
What a determined agent can still do: run it INSIDE Claude Code's sandbox with those variables unset
(`env -u CLAUDECODE -u SANDBOX_RUNTIME ...`) in a PID namespace whose first process it started
itself; there nothing proves who started it, and the OS walls it off instead: no GPU, results.tsv,
records/, .git and the rest read-only, the signing key hidden, so an apply, a re-baseline or a
measurement writes nothing the harness trusts. Outside the sandbox the guard lets it run nothing but
`auto-optim-agent`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from harness import console
from harness.cli.settings import CHECKOUT, write_settings

# What `auto-optim --help` prints: the verbs for a person at a terminal (the docstring above is the design).
HELP = """auto-optim VERB [ARGS]: the person's program (the agent has its own, auto-optim-agent, which takes no argument).

First use, as README's Quickstart:
    auto-optim prepare                          this machine's input, its reference and the pool of fresh inputs
    auto-optim run --desc "what and why"        measure optimize.py against the keeper (the first time, against a
                                                new fp32 eager baseline row): one row, keep, revert, inconclusive, ...

Verbs (each takes --help, outside Claude Code):
    run       measure a candidate (--candidate F, --preset P; --rebaseline starts a new comparison)
    measure   the same into a signed record file, not results.tsv (--record-out F: a remote GPU)
    apply     record a file `measure` wrote and your key signed
    wave      several candidates at once, one a GPU, then record them all
    verify    the gate alone: does a candidate reproduce the reference (nothing recorded)
    bench     time a candidate (--baseline: fp32 and bf16 eager beside it, in one run)
    profile   one profiled call: where the time goes
    floor     probe this machine's peak rates (--verdict: the stop rule on its rows)
    prepare   make or remake this machine's assets
    records   the ledger: show [EXP], source EXP, leaderboard, restore, verify
    settings  write .claude/settings.json from agent/policy.py (--check: compare)
    new-target NAME   scaffold targets/NAME (from the repository root): a working stand-in to replace with your model

A power (apply, measure, --rebaseline, --unsandboxed) asks a person at a terminal to confirm it;
started by Claude Code's tool, every verb refuses. Design: harness/cli/person.py's docstring."""

# What each power does, as the confirmation names it.
POWERS = {
    "apply": "record a result from a record file (signed with your key) into results.tsv and git",
    "measure": "measure and write a signed record file where you named it",
    "rebaseline": "start a new comparison: record a new fp32 eager baseline row",
    "unsandboxed": "run the candidate's code WITHOUT the sandbox, with your rights",
}
# Each verb's module (its parser() and main(), or run() for the three of run_experiment).
TOOLS = {"run": "harness.cli.run_experiment", "measure": "harness.cli.run_experiment",
         "apply": "harness.cli.run_experiment", "wave": "harness.cli.wave", "verify": "harness.cli.verify",
         "bench": "harness.cli.bench", "profile": "harness.cli.profile", "floor": "harness.decide.floor",
         "prepare": "harness.cli.prepare", "records": "harness.ledger.cli"}
CLAUDE_VARIABLES = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "SANDBOX_RUNTIME")


def _ancestors(pid: int) -> list[int]:
    """The parent chain of `pid` as this PID namespace's /proc shows it."""
    chain = []
    while pid > 1 and len(chain) < 64:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        chain.append(pid)
    return chain


def _is_claude(pid: int) -> bool:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        argv = []
    names = {os.path.basename(exe), os.path.basename(argv[0].decode(errors="replace")) if argv else ""}
    return bool(names & {"claude", "claude.exe"}) or "@anthropic-ai/claude-code" in exe or \
        any(b"@anthropic-ai/claude-code" in a for a in argv)


def started_by_claude_code() -> str | None:
    """Why this process looks started by Claude Code's Bash tool (see the module docstring), else None."""
    for name in CLAUDE_VARIABLES:
        if os.environ.get(name):
            return f"{name} is set, as in Claude Code's Bash tool"
    for pid in _ancestors(os.getpid()):
        if _is_claude(pid):
            return f"process {pid}, an ancestor, is Claude Code (claude)"
    try:
        if Path("/proc/1/comm").read_text().strip() == "bwrap":
            return "it runs in a bubblewrap sandbox (Claude Code's)"
    except OSError:
        pass
    return None


def powers(a: argparse.Namespace) -> list[str]:
    """The person's powers a tool's parsed options ask for (the tool's own parser made `a`)."""
    asked = [p for p in ("apply", "rebaseline", "unsandboxed") if getattr(a, p, None)]
    return asked + (["measure"] if getattr(a, "measure_only", False) or getattr(a, "record_out", None) else [])


def refuse_agent(parser: argparse.ArgumentParser, argv: list[str], tool: str) -> None:
    """For the aliases (`python -P -m harness.cli.<tool>`): exit 2, one line, when a power is asked for from
    Claude Code's tool. Other uses (a measurement, a wave member's --measure-only) pass."""
    asked = [p for p in powers(parser.parse_args(argv)) if p != "measure"]
    why = started_by_claude_code() if asked else None
    if why:
        print(f"{tool}: refused: --{asked[0]} is the person's, and {why}; the agent measures through "
              "auto-optim-agent (request.json)", file=sys.stderr)
        sys.exit(2)


def confirm(asked: list[str]) -> bool:
    """With a terminal on stdin, name each power and wait for "yes"; without one (a script), go on."""
    if not asked or not sys.stdin.isatty():
        return True
    for p in asked:
        print(f"auto-optim: {p}: {POWERS[p]}.", file=sys.stderr)
    try:
        answer = input("Type yes to go on: ")
    except EOFError:
        return False
    return answer.strip().lower() == "yes"


def _run_tool(verb: str, rest: list[str]) -> int:
    import importlib

    from harness import goals, paths
    from harness.sandbox.interpreter import untrusted_python

    sys.argv[0] = f"auto-optim {verb}"  # each tool's parser takes its usage line's name from here
    early = argparse.ArgumentParser(prog=f"auto-optim {verb}", add_help=False)
    paths.add_target_option(early)  # the target first: its folder is checked below
    early.parse_known_args(rest)
    try:
        target = goals.path().parent
    except goals.GoalsError as e:
        print(f"auto-optim: refused: {e}", file=sys.stderr)
        return 2
    why = untrusted_python(sys.prefix, sys.executable, sys.path, sorted({CHECKOUT, target}))
    if why:
        print(f"auto-optim: refused: {why}", file=sys.stderr)
        return 2
    if verb == "apply":  # asked before torch is imported: a person answers at once
        pa = argparse.ArgumentParser(prog="auto-optim apply", description="record a signed record file")
        pa.add_argument("record", type=Path)
        paths.add_target_option(pa)
        record = pa.parse_args(rest).record
        if not confirm(["apply"]):
            print("auto-optim apply: not confirmed; nothing done", file=sys.stderr)
            return 2

    module = importlib.import_module(TOOLS[verb])
    if verb in ("run", "measure", "apply"):
        if verb == "apply":
            a = module.parser().parse_args([])
            a.apply = record
        else:
            a = module.parser().parse_args(rest)
            if a.apply or (verb == "run" and (a.measure_only or a.record_out or a.best_median is not None)):
                print(f"auto-optim {verb}: refused: use `auto-optim apply REC.json` or `auto-optim measure "
                      "--record-out REC.json ...`", file=sys.stderr)
                return 2
            a.measure_only = a.measure_only or verb == "measure"
        if verb != "apply" and not confirm(powers(a)):
            print(f"auto-optim {verb}: not confirmed; nothing done", file=sys.stderr)
            return 2
        return console.run_cli(lambda: module.run(a), "auto-optim", "nothing recorded for the run in progress")
    if hasattr(module, "parser") and not confirm(powers(module.parser().parse_args(rest))):
        print(f"auto-optim {verb}: not confirmed; nothing done", file=sys.stderr)
        return 2
    return console.run_cli(lambda: module.main(rest), "auto-optim")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    verbs = [*TOOLS, "settings", "new-target"]
    if not args or args[0] in ("-h", "--help"):
        print(HELP, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    verb, rest = args[0], args[1:]
    if verb not in verbs:
        print(f"auto-optim: refused: no verb {verb[:60]!r}; one of {', '.join(verbs)}", file=sys.stderr)
        return 2
    why = started_by_claude_code()
    if why:
        print(f"auto-optim: refused: {why}; auto-optim is the person's program, the agent measures through "
              "auto-optim-agent (request.json)", file=sys.stderr)
        return 2
    if verb == "settings":
        pa = argparse.ArgumentParser(prog="auto-optim settings")
        pa.add_argument("--check", action="store_true", help="exit 1 when .claude/settings.json is not as generated")
        return write_settings(pa.parse_args(rest).check)
    if verb == "new-target":  # no target to resolve yet: it makes one
        from harness.cli import new_target

        return console.run_cli(lambda: new_target.main(rest, prog="auto-optim new-target"), "auto-optim")
    return _run_tool(verb, rest)


if __name__ == "__main__":
    sys.exit(main())
