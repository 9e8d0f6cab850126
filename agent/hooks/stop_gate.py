#!/usr/bin/env python3
"""Stop / SubagentStop hook: no turn ends with an unrecorded or red experiment.

Claude Code runs this when the agent (or a subagent) is about to finish its reply. It refuses
(JSON {"decision": "block", "reason": ...} on stdout, exit 0; the reason becomes Claude's next
instruction) while either holds:
  - the candidate file (goals.json "candidate", optimize.py) differs from the candidate_sha of
    the last row of results.tsv, and, after a row that is not a keeper, from its committed version
    (run_experiment puts the best keeper, which is committed, back after a revert, an inconclusive
    run or a failed gate: a status other than baseline and keep, as KEEPERS below reads it);
  - the last row's status is gate_fail, crash, timeout or tampered (the last thing tried is red;
    a wave (harness/cli/wave.py) records its failed members first, so its last row is red only when
    every member failed);
  - a variant in candidates/ (*.py) has no row with its sha256: written for a wave, never measured.
The candidate and candidates/ are read without following a link (harness/nofollow.py): a link
there is a problem to fix, never a file read for the agent.
With no results.tsv rows yet, it refuses only while the candidate differs from its committed
version (git) or a variant waits unmeasured, so a fresh checkout never traps a person who only
asked a question.

Who it applies to: the main agent (Stop) and the model-optimizer subagent (SubagentStop with
agent_type "model-optimizer"); other subagents (Explore, general-purpose) edit nothing and pass.
While work is in flight that will settle the candidate, the main agent may stop: a
model-optimizer subagent listed as running in the Stop payload's background_tasks, or a harness
run (the agent's door, run_experiment.py or wave.py) that holds the checkout's lock, runs/run_experiment.lock: the
pid the harness wrote there is alive and is that harness (runs/ is read-only to the agent, so only
the harness writes that pid; a background shell whose command merely names run_experiment.py is
not a run). The candidate is that work's to record, and Claude Code wakes the main agent when it
ends, so the next Stop is gated again. Telling it to record or check out the file now would fight
the subagent that is editing it.

Loops: per the hooks docs, `stop_hook_active` is true when Claude is already continuing because
a Stop hook blocked. The gate refuses the same problem at most AUTO_OPTIM_STOP_MAX_BLOCKS (default
8) times in a row per agent (subagents send their parent's session_id, so the count is kept per
agent_id when the payload has one); a new problem (an experiment recorded, the candidate changed)
starts the count again, so an agent that works between refusals is never let off. Then it lets the
stop through with a warning to the person (JSON "systemMessage"), so an agent that cannot comply
never spins forever. 8 is Claude Code's own cap (2.1.330 ends a turn after 8 Stop-hook blocks in
a row with no tool call between them; CLAUDE_CODE_STOP_HOOK_BLOCK_CAP), so the gate is never the
first to give up.

Usage (what Claude Code does):  echo '{"hook_event_name": "Stop", ...}' | python3 agent/hooks/stop_gate.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
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
git_plumbing, nofollow, ledger_rows = _lib.git_plumbing, _lib.nofollow, _lib.load("harness/ledger/rows.py")
CANDIDATES_DIR, OPTIMIZER_AGENT, candidate_name, project_root, read_payload, shown, target_root = (
    _lib.CANDIDATES_DIR, _lib.OPTIMIZER_AGENT, _lib.candidate_name, _lib.project_root, _lib.read_payload, _lib.shown,
    _lib.target_root)

RED, KEEPERS = ledger_rows.RED, ledger_rows.KEEPERS
IN_FLIGHT = ("running", "pending")
# The texts name paths from the project root, where the agent's Bash calls start (_hooklib.shown);
# a wave's members stay relative to the target's folder, as request.json names them.
DOOR = "then run exactly `auto-optim-agent` (one Bash call with dangerouslyDisableSandbox: true)"
RUN = 'write {request}: {{"run": "experiment", "desc": "<one line: what you changed and why>"}}, ' + DOOR
WAVE = 'write {request}: {{"run": "wave", "candidates": [{files}]}}, ' + DOOR
# .git is read-only to the agent's shell (only run_experiment commits), so restore by reading git.
RESTORE = "git show HEAD:{name} > {name}"


def read_rows(path: Path) -> list[dict[str, str]]:
    """results.tsv's whole rows (harness/ledger/rows.py parse: the harness's one parser)."""
    try:
        return ledger_rows.parse(path.read_text())[0]
    except (OSError, ValueError):
        return []


def same_sha(current: str, recorded: str | None) -> bool:
    """results.tsv may hold the full hex digest or a prefix of it (at least 8 characters)."""
    recorded = (recorded or "").strip().lower()
    return len(recorded) >= 8 and current.startswith(recorded)


def problem(project: Path, root: Path) -> str | None:
    """Why the turn may not end, or None (`root`: the target's folder in `project`)."""
    rows = read_rows(root / "results.tsv")
    name = candidate_name(root)
    path, results = shown(project, root, name), shown(project, root, "results.tsv")
    run = RUN.format(request=shown(project, root, "request.json"))
    restore = RESTORE.format(name=path)
    if not rows:
        if committed_differs(root, name):
            return (f"{path} differs from its committed version and no experiment is recorded yet. "
                    f"Record it (the first experiment becomes the baseline): {run} "
                    f"-- or drop the change with `{restore}`.")
        return unmeasured_variants(project, root, rows)
    last = rows[-1]
    exp, status = last.get("exp", "?"), (last.get("status") or "").strip()
    try:
        current = nofollow.sha256(root, name)
    except FileNotFoundError:
        return f"{path} is missing. Restore the last kept version ({restore}), then {run}"
    except (OSError, ValueError) as e:
        return f"{e}. Make {path} a plain file again ({restore}), then {run}"
    # After anything but a keeper, run_experiment leaves the candidate at the best keeper, which is
    # the committed version (a keeper commits it; the baseline is a frozen file of its own).
    recorded = same_sha(current, last.get("candidate_sha")) or (
        status not in KEEPERS and not committed_differs(root, name))
    if not recorded:
        return (f"{path} has changed since the last recorded experiment {exp} (its sha256 {current[:12]} "
                f"is not in {results}), so this change is unmeasured. Record it now: {run} "
                f"-- or, to drop the change, restore the last kept version with `{restore}`. "
                "Then continue the loop in program.md.")
    if status in RED:
        desc = (last.get("desc") or "").strip()
        return (f"The last experiment {exp} ({desc!r}) ended with status {status}: the latest attempt is red. "
                f"Read its output ({results}, {shown(project, root, 'PROGRESS.md')}), fix the cause in {path}, {run} "
                f"-- or, if you abandon that idea, note it under Dead ends in PROGRESS.md and re-measure the "
                f'current best the same way, with "desc": "re-measure best after {exp}"')
    return unmeasured_variants(project, root, rows)


def unmeasured_variants(project: Path, root: Path, rows: list[dict[str, str]]) -> str | None:
    """A wave's variant (candidates/*.py) that no row measured: written, never recorded."""
    recorded = [r.get("candidate_sha") for r in rows]
    try:
        files = [f"{CANDIDATES_DIR}/{n}" for n in nofollow.listdir(root, CANDIDATES_DIR) if n.endswith(".py")]
        new = [f for f in files if not any(same_sha(nofollow.sha256(root, f), r) for r in recorded)]
    except (OSError, ValueError) as e:
        return f"{e}: delete it, or make it a plain file and measure it."
    if not new:
        return None
    names = " ".join(shown(project, root, f) for f in new)
    wave = WAVE.format(request=shown(project, root, "request.json"), files=", ".join(json.dumps(f) for f in new))
    return (f"{names}: not measured yet (no row of {shown(project, root, 'results.tsv')} has its sha256). "
            f"Measure them in one wave: {wave} -- or delete the ones you dropped.")


def committed_differs(root: Path, name: str) -> bool:
    """True when git can show the committed candidate and the file on disk differs from it."""
    work = git_plumbing.top(root)
    committed = git_plumbing.show(work, "HEAD", os.path.relpath(root / name, work)) if work else None
    if committed is None:
        return False  # no git, no commit, or the file is not tracked: nothing to compare with
    try:
        return nofollow.read_bytes(root, name) != committed
    except (OSError, ValueError):
        return True


def counter_file(payload: dict) -> Path:
    """One block counter per agent: the session's, or the subagent's (same session_id, own agent_id)."""
    key = f"{payload.get('session_id', '')}-{payload.get('agent_id', '')}"
    safe = "".join(c for c in key if c.isalnum() or c in "-_")[:120] or "nosession"
    return Path(tempfile.gettempdir()) / f"auto-optim-stop-gate-{safe}.json"


LOCK = Path("runs") / "run_experiment.lock"  # harness/cli/run_experiment.py acquire_lock(); wave.py holds it too
# The programs that take it: the agent's door and the person's program (console scripts), and the tools as
# modules (`python -P -m harness.cli.run_experiment`, or a wave's member started by harness/start.py).
HARNESS_RUNS = ("harness.cli.run_experiment", "harness.cli.wave", "/auto-optim-agent", "/auto-optim")


def harness_running(root: Path) -> bool:
    """A run_experiment or wave holds this checkout's lock: the pid it wrote there ("pid N, since
    ...", records.lock_file) holds an exclusive flock on that file (/proc/locks), is alive and its
    command line is that harness script."""
    lock = root / LOCK
    try:
        words = lock.read_text().split()
        pid = int(words[1].rstrip(",")) if words[:1] == ["pid"] else 0
        inode = lock.stat().st_ino
        held = any(f[1:5] == ["FLOCK", "ADVISORY", "WRITE", str(pid)] and f[5].endswith(f":{inode}")
                   for f in (line.split() for line in Path("/proc/locks").read_text().splitlines()) if len(f) > 5)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if pid > 0 and held else []
    except (OSError, ValueError, IndexError):
        return False
    return any(arg.decode(errors="replace").endswith(HARNESS_RUNS) for arg in cmdline)


def subagent_at_work(task: dict) -> bool:
    """A model-optimizer subagent still in flight: it will edit or record the candidate."""
    return str(task.get("status", "")) in IN_FLIGHT and task.get("agent_type") == OPTIMIZER_AGENT


def gated(payload: dict, root: Path) -> bool:
    """Whether this stop is the gate's business (see the docstring: who it applies to)."""
    if payload.get("hook_event_name") == "SubagentStop":
        return payload.get("agent_type") == OPTIMIZER_AGENT
    tasks = [t for t in payload.get("background_tasks") or [] if isinstance(t, dict)]
    return not (any(subagent_at_work(t) for t in tasks) or harness_running(root))


MAX_BLOCKS = 8  # Claude Code 2.1.330's own cap on Stop-hook blocks in a row (see the docstring)


def main() -> int:
    payload = read_payload()
    project = project_root(payload)
    root = target_root(project)  # the target's results, candidate and lock
    if not gated(payload, root):
        return 0
    reason = problem(project, root)
    counter = counter_file(payload)
    if reason is None:
        counter.unlink(missing_ok=True)
        return 0
    blocks = 0
    if payload.get("stop_hook_active"):
        try:
            last = json.loads(counter.read_text())
            blocks = int(last.get("blocks", 0)) if last.get("reason") == reason else 0
        except (OSError, ValueError, AttributeError):
            blocks = 0
    limit = int(os.environ.get("AUTO_OPTIM_STOP_MAX_BLOCKS", str(MAX_BLOCKS)))
    if blocks >= limit:
        counter.unlink(missing_ok=True)
        print(json.dumps({"systemMessage": f"stop_gate: letting the turn end after {blocks} refusals in a row, "
                                           f"but the work is not recorded: {reason}"}))
        return 0
    counter.write_text(json.dumps({"blocks": blocks + 1, "reason": reason}))
    print(json.dumps({"decision": "block", "reason": reason}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
