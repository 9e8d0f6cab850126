"""`auto-optim-agent`: the agent's door, the one harness command it runs outside Claude Code's sandbox.

It takes no argument (any, even -h, is refused): there is nothing in its command line to parse,
so nothing a shell or a parser could read differently. What to do comes from request.json, which the
agent writes beside goals.json (harness/cli/request.py has the schema), for example
    {"run": "experiment", "desc": "bf16 weights: halves the conv's bytes"}
    {"run": "wave", "candidates": ["candidates/a.py", "candidates/b.py"]}
    {"run": "verify", "candidate": "candidates/a.py"}      (bench and profile alike; "floor" takes none)

Whom it serves: the default target (pyproject.toml's [tool.auto-optim] target; the person switches
it) of the checkout its own code lives in (this file's folder's parent), never the current
directory, AUTO_OPTIM_GOALS or any other variable: its targets/<name>/ folder, whose goals.json is
committed and unchanged. Each refusal is one line on stderr, exit 2, nothing measured
(cheap checks first: a refusal imports no torch). Before it measures it checks, in order:
  - no argument, and a Python that lies outside the project (harness/sandbox/interpreter.py);
  - request.json beside that goals.json, read without following a link
    (harness/nofollow.py), at most 64 KiB, valid under the schema;
  - that the files it will read (the candidate or the wave's variants, PROGRESS.md) are plain files;
  - that no untracked module sits in the checkout's or the target's folder (neither is on sys.path,
    harness/__init__.py; a planted `triton.py` there is refused all the same, outside the sandbox), and no
    untracked CLAUDE.md, AGENTS.md, .gitattributes, .claude/ ... outside the protected paths
    (agent/policy.py stray_configuration);
  - that it runs outside Claude Code's sandbox (runs/ must be a folder it can write), with the
    worker's sandbox available (there is no unsandboxed path through it).
Then it consumes the request (moved to runs/requests/<time>.json, so a stale one is never run
again; a refused one stays to be fixed) and runs it: an experiment (harness/cli/run_experiment.py),
a wave (harness/cli/wave.py), verify / bench / profile (the file read without following a link; a
variant's profile goes to profiles/candidates-NAME.md), or the stop rule's
verdict (harness/decide/floor.py --verdict). The person's powers are not in the schema: harness/cli/person.py.
Exit: the tool's own (run_experiment: 0 recorded, 1 the candidate failed, 2 refused).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
from harness import console, paths
from harness.cli import request as schema
from harness.goals import GOALS_ENV
from harness import nofollow
from harness.ledger import git_plumbing
from harness.paths import agent_policy
from harness.sandbox.interpreter import untrusted_python

NAME = "auto-optim-agent"
REQUEST = "request.json"
EXAMPLE = '{"run": "experiment", "desc": "what and why"}'
IMPORTABLE = (".py", ".pyc", ".pyw", ".so")


class Refusal(Exception):
    """One line: why the door does nothing."""


def _rel(folder: Path) -> str:
    rel = folder.relative_to(CHECKOUT).as_posix()
    return "" if rel == "." else rel + "/"


def target_folders() -> list[Path]:
    """The default target's folder (pyproject.toml's [tool.auto-optim] target: the person switches it),
    a plain folder with a goals.json file; never one an argument, a variable or the cwd names."""
    try:
        rel = f"{paths.TARGETS}/{paths.default_target(CHECKOUT)}"
    except paths.TargetError as e:
        raise Refusal(str(e)) from None
    if nofollow.kind(CHECKOUT, paths.TARGETS) != "dir" or nofollow.kind(CHECKOUT, rel) != "dir" or \
            nofollow.kind(CHECKOUT, f"{rel}/goals.json") != "file":
        raise Refusal(f"{rel}/goals.json is not a plain file in a plain folder: the default target (pyproject.toml) "
                      "must be one of this checkout's")
    return [CHECKOUT / rel]


def request_path() -> str:
    """Where the door reads its request, from the checkout's root (for the refusals' texts)."""
    try:
        return f"{paths.TARGETS}/{paths.default_target(CHECKOUT)}/{REQUEST}"
    except paths.TargetError:
        return f"{paths.TARGETS}/<name>/{REQUEST} (<name>: pyproject.toml's [tool.auto-optim] target)"


def find_request() -> tuple[Path, bytes]:
    """The one target folder holding request.json, and the request's bytes."""
    found = []
    for folder in target_folders():
        where = _rel(folder) + REQUEST
        try:
            what = nofollow.kind(CHECKOUT, where)
        except nofollow.NotPlain as e:
            raise Refusal(str(e)) from None
        if what != "missing":
            found.append((folder, where, what))
    if not found:
        return_to = " or ".join(f"{_rel(f) or './'}" for f in target_folders())
        raise Refusal(f"no {REQUEST} in {CHECKOUT} ({return_to}): write {return_to}{REQUEST}, e.g. {EXAMPLE}")
    if len(found) > 1:
        raise Refusal(f"{REQUEST} in {found[0][1]} and {found[1][1]}: leave one")
    folder, where, _ = found[0]
    try:
        return folder, nofollow.read_bytes(CHECKOUT, where, schema.CAP)
    except nofollow.NotPlain as e:
        raise Refusal(str(e)) from None


def committed_goals(folder: Path) -> dict:
    """goals.json of `folder`, which must be this checkout's and committed as it is (an agent-made
    target's goals.json would name an adapter, code this process would import)."""
    work = git_plumbing.top(folder)
    if work is None or os.path.abspath(work) != str(CHECKOUT):
        raise Refusal(f"{folder} is not in the git checkout {CHECKOUT} (keepers are committed there)")
    rel = _rel(folder) + "goals.json"
    try:
        data = nofollow.read_bytes(CHECKOUT, rel, 1 << 20)
    except (OSError, ValueError) as e:
        raise Refusal(f"{rel}: {e}") from None
    if git_plumbing.show(CHECKOUT, "HEAD", rel) != data:
        raise Refusal(f"{rel} is not committed as it is: the door serves only targets a person committed")
    try:
        goals = json.loads(data)
    except ValueError as e:
        raise Refusal(f"{rel} is not JSON: {e}") from None
    if not isinstance(goals, dict) or not isinstance(goals.get("presets"), dict):
        raise Refusal(f"{rel} has no presets")
    return goals


def planted(folder: Path) -> list[str]:
    """Untracked entries of `folder` Python could import (a target's packages are importable by name,
    harness/target/finder.py: a module missing from site-packages would be taken from there)."""
    rel = _rel(folder)
    tracked = {Path(p).name for p in git_plumbing.git(CHECKOUT, "ls-tree", "--name-only", "HEAD", "--", rel or ".").split("\n")}
    policy = agent_policy()
    known = set(policy.protected_paths(CHECKOUT)) | {rel + policy.CANDIDATES_DIR, rel + "__pycache__"}
    out = []
    for name in nofollow.listdir(CHECKOUT, rel.rstrip("/") or "."):
        kind = nofollow.kind(CHECKOUT, rel + name)
        importable = name.partition(".")[0].isidentifier() and (kind == "dir" or name.endswith(IMPORTABLE))
        if importable and name not in tracked and rel + name not in known:
            out.append(rel + name)
    return out


def check_setting(folder: Path, req: schema.Request, candidate: str) -> None:
    """What must hold before anything is measured (see the module docstring); cheap checks first,
    so that a refusal costs no import of torch."""
    measured = req.files() or ((candidate,) if req.run == "experiment" else ())
    for rel in (*measured, "PROGRESS.md"):
        what = nofollow.kind(folder, rel)
        if what == "missing" and rel != "PROGRESS.md":
            raise Refusal(f"{_rel(folder)}{rel} not found")
        if what not in ("missing", "file"):
            raise Refusal(f"{_rel(folder)}{rel} is a {what}, not a plain file: the door reads only plain files")
    found = [p for f in dict.fromkeys((CHECKOUT, folder)) for p in planted(f)]
    if found:
        raise Refusal(f"{', '.join(found)}: untracked, where the harness could import it in place of a real module; "
                      "delete it (scratch files belong in $TMPDIR) and run the door again")
    tracked = set(git_plumbing.git(CHECKOUT, "ls-files", "-z").split("\0"))
    stray = agent_policy().stray_configuration(CHECKOUT, tracked)
    if stray:
        raise Refusal(f"{', '.join(stray[:3])}: configuration or instructions git does not track (Claude Code loads a "
                      "CLAUDE.md beside a file it reads; git applies a .gitattributes); delete it and run the door again")
    if nofollow.kind(folder, "runs") not in ("dir", "missing"):
        raise Refusal(f"{_rel(folder)}runs is not a folder: Claude Code's sandbox leaves an empty placeholder there while "
                      "a sandboxed command of yours runs (in the background?); let it end, then run the door again")
    try:
        nofollow.write_bytes(folder, "runs/requests/.writable", b"", make_folders=True)
        nofollow.unlink(folder, "runs/requests/.writable")
    except OSError as e:
        raise Refusal(f"{_rel(folder)}runs/ is not writable here ({e.strerror or e}): the door runs outside Claude "
                      "Code's sandbox, as a Bash call with dangerouslyDisableSandbox: true") from None
    if req.run != "floor":
        from harness.sandbox import boundary

        why = boundary.available()
        if why:
            raise Refusal(f"no sandbox for the candidate: {why}; the door never runs a candidate without one")


def consume(folder: Path, raw: bytes) -> str:
    """Move the request to runs/requests/<time>.json (it is never run twice); its new name."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    rel = f"runs/requests/{stamp}-{os.getpid()}.json"
    nofollow.write_bytes(folder, rel, raw, make_folders=True)
    nofollow.unlink(folder, REQUEST)
    return rel


def run(folder: Path, req: schema.Request, candidate: str) -> int:
    """The request, handed to the tool that does it (never a command line built from its text)."""
    preset = [f"--preset={req.preset}"] if req.preset else []
    if req.run in ("experiment", "wave"):
        from harness.cli import run_experiment, wave

        tool = run_experiment if req.run == "experiment" else wave
        a = tool.parser().parse_args([str(folder / f) for f in req.candidates])
        a.desc, a.preset, a.no_profile = req.desc, req.preset, req.no_profile
        return console.run_cli(lambda: tool.run(a), NAME, "nothing recorded for the run in progress")
    if req.run == "floor":
        from harness.decide import floor

        return floor.main(["--verdict", *preset])
    from harness.cli import bench, verify

    from harness.measure import profile
    args = [f"--candidate={folder / req.candidate}", *preset]  # read without following a link (harness/measure/session.py)
    if req.run == "profile":
        out = Path(candidate).stem if req.candidate == candidate else f"candidates-{Path(req.candidate).stem}"
        args += [f"--out={folder / 'profiles' / out}.md", f"--title={req.candidate}"]
    tool = {"verify": verify, "bench": bench, "profile": profile}[req.run]
    return console.run_cli(lambda: tool.main(args), NAME)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if Path(schema.__file__).resolve().parent != CHECKOUT / "harness" / "cli":
            raise Refusal(f"the harness imported ({schema.__file__}) is not this checkout's ({CHECKOUT})")
        if args:
            raise Refusal(f"it takes no arguments, not {args[0][:60]!r}: write {request_path()} "
                          f"(e.g. {EXAMPLE}) and run `{NAME}` alone")
        why = untrusted_python(sys.prefix, sys.executable, sys.path, [CHECKOUT])
        if why:
            raise Refusal(why)
        os.environ.pop(GOALS_ENV, None)  # the door picks its target itself, below
        folder, raw = find_request()
        goals = committed_goals(folder)
        candidate = str(goals.get("candidate") or "optimize.py")
        req = schema.parse(raw, goals["presets"], candidate)
        os.environ[GOALS_ENV] = str(folder / "goals.json")
        check_setting(folder, req, candidate)
        saved = consume(folder, raw)
    except (Refusal, schema.BadRequest, OSError) as e:
        print(f"{NAME}: refused: {e}", file=sys.stderr)
        return 2
    print(f"{NAME}: {req.run} from {_rel(folder)}{REQUEST} (kept as {_rel(folder)}{saved})", file=sys.stderr)
    return run(folder, req, candidate)


if __name__ == "__main__":
    sys.exit(main())
