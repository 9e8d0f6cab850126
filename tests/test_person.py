"""harness/cli/person.py, `auto-optim`: the person's program refuses Claude Code's tool (its variables, a
claude ancestor, Claude Code's bubblewrap), asks a person at a terminal to confirm each power, and
its aliases (python harness/<tool>.py) refuse a power to Claude Code's tool too."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import person, verify
from conftest import tool

REPO = Path(__file__).resolve().parent.parent
PERSON = tool("harness.cli.person")  # `auto-optim`, as its console script runs it


def plain_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in person.CLAUDE_VARIABLES and not k.startswith("CLAUDE")}
    return {**env, **extra}


def run(*args: str, env: dict | None = None, prefix: list[str] | None = None, stdin=subprocess.DEVNULL):
    return subprocess.run([*(prefix or []), *PERSON, *args], env=env or plain_env(), cwd=REPO,
                          stdin=stdin, capture_output=True, text=True, timeout=120)


def refused(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "refused" in lines[0], r.stdout + r.stderr
    return lines[0]


def test_it_works_for_a_person():
    r = run("settings", "--check")
    assert r.returncode == 0 and "as generated" in r.stdout, r.stdout + r.stderr
    assert "no verb 'apply-all'" in refused(run("apply-all"))
    usage = run("run", "--help")  # each tool's usage names the verb a person typed
    assert usage.returncode == 0 and usage.stdout.startswith("usage: auto-optim run ["), usage.stdout[:200]


def test_help_lists_every_verb(capsys):
    """`auto-optim --help` is a person's list of verbs (no arguments at all: the same on stderr, exit 2);
    a verb added to TOOLS without a line there fails here."""
    assert person.main(["--help"]) == 0
    shown = capsys.readouterr().out
    listed = {line.split()[0] for line in shown.split("Verbs")[1].splitlines()[1:] if line.startswith("    ")}
    assert listed == {*person.TOOLS, "settings", "new-target"}, listed
    assert person.main([]) == 2 and capsys.readouterr().err == shown


def test_new_target_is_a_verb(tmp_path: Path, capsys, monkeypatch):
    """`auto-optim new-target NAME --dir DIR` scaffolds as harness/cli/new_target.py does (its end to end:
    test_new_target.py); a second time it writes nothing over and says why in one line, exit 2."""
    monkeypatch.setattr(person, "started_by_claude_code", lambda: None)  # the suite may itself run under it
    folder = tmp_path / "demo"
    assert person.main(["new-target", "demo", "--dir", str(folder)]) == 0
    assert (folder / "goals.json").is_file() and (folder / "demo_model" / "target.py").is_file()
    assert "auto-optim run --target demo" in capsys.readouterr().out
    goals = (folder / "goals.json").read_text()
    assert person.main(["new-target", "demo", "--dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("auto-optim new-target: ") and "exists" in err[0], err
    assert (folder / "goals.json").read_text() == goals


@pytest.mark.parametrize("variable", ["CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "SANDBOX_RUNTIME"])
def test_claude_codes_variables_are_refused(variable: str):
    """Claude Code 2.1.330 sets CLAUDECODE=1 and CLAUDE_CODE_ENTRYPOINT in every Bash call, SANDBOX_RUNTIME
    in sandboxed ones."""
    why = refused(run("settings", env=plain_env(**{variable: "1"})))
    assert variable in why and "auto-optim-agent" in why


def test_a_claude_ancestor_is_refused(tmp_path: Path):
    """Outside the sandbox an unsandboxed Bash call's shell is the claude process's child: the chain of
    parents is read from /proc, whatever the variables say."""
    claude = tmp_path / "claude"
    claude.symlink_to(sys.executable)
    code = f"import subprocess, sys; sys.exit(subprocess.call({PERSON!r} + ['settings']))"
    r = subprocess.run([str(claude), "-c", code], env=plain_env(), capture_output=True, text=True, timeout=60)
    assert "an ancestor, is Claude Code" in refused(r)


def test_claude_codes_bubblewrap_is_refused():
    """Inside Claude Code's sandbox (a PID namespace whose first process is bwrap), with the variables unset."""
    r = run("settings", prefix=["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--"])
    assert "bubblewrap sandbox" in refused(r)


def test_powers_are_read_from_the_tools_own_parser():
    from harness.cli import run_experiment, wave

    p = run_experiment.parser()
    assert person.powers(p.parse_args(["--desc", "x"])) == []
    assert person.powers(p.parse_args(["--app", "f.json"])) == ["apply"]  # argparse's abbreviation, as the tool reads it
    assert person.powers(p.parse_args(["--desc", "x", "--rebase", "--unsand"])) == ["rebaseline", "unsandboxed"]
    assert person.powers(p.parse_args(["--desc", "x", "--measure-only", "--record-out", "r.json"])) == ["measure"]
    assert person.powers(wave.parser().parse_args(["a.py", "--unsandboxed"])) == ["unsandboxed"]
    assert person.powers(verify.parser().parse_args(["--unsandboxed"])) == ["unsandboxed"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_person_at_a_terminal_confirms_each_power(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setattr(sys, "stdin", Terminal("no\n"))
    assert not person.confirm(["apply"])
    assert "record a result from a record file" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", Terminal("yes\n"))
    assert person.confirm(["rebaseline", "unsandboxed"])
    monkeypatch.setattr(sys, "stdin", Terminal(""))
    assert not person.confirm(["measure"])  # end of input: not confirmed
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert person.confirm(["apply"])  # a script (no terminal) goes on
    assert person.confirm([])


def test_the_confirmation_on_a_real_terminal(tmp_path: Path):
    """`auto-optim apply` with a terminal on stdin: "no" does nothing (exit 2, the record not even read)."""
    leader, follower = pty.openpty()
    try:
        os.write(leader, b"no\n")
        r = run("apply", str(tmp_path / "missing.json"), stdin=follower)
    finally:
        os.close(leader)
        os.close(follower)
    assert r.returncode == 2 and "not confirmed; nothing done" in r.stderr and "cannot read record" not in r.stderr, r


def test_run_leaves_apply_and_measure_to_their_verbs():
    assert person.main(["run", "--desc", "x", "--apply", "f.json"]) == 2
    assert person.main(["run", "--desc", "x", "--measure-only", "--record-out", "r.json"]) == 2


def test_an_alias_refuses_a_power_to_claude_codes_tool(capsys):
    """`python harness/cli/run_experiment.py --apply ...` from Claude Code's tool: one line, exit 2; without a
    power it goes on (a wave's members measure through it)."""
    env = plain_env(CLAUDECODE="1")
    r = subprocess.run([*tool("harness.cli.run_experiment"), "--app", "forged.json"], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()], r.stderr
    assert "--apply is the person's" in r.stderr and "CLAUDECODE" in r.stderr
    os.environ["CLAUDECODE"] = "1"
    try:
        with pytest.raises(SystemExit) as e:
            person.refuse_agent(verify.parser(), ["--unsandboxed"], "harness/cli/verify.py")
        assert e.value.code == 2
        person.refuse_agent(verify.parser(), ["--preset", "tiny"], "harness/cli/verify.py")  # no power: goes on
    finally:
        del os.environ["CLAUDECODE"]
    person.refuse_agent(verify.parser(), ["--unsandboxed"], "harness/cli/verify.py")  # a person: goes on
