#!/usr/bin/env python3
"""Stop / SubagentStop hook: no turn ends with an unrecorded or red experiment.

Claude Code runs this when the agent (or a subagent) is about to finish its reply. It refuses
(JSON {"decision": "block", "reason": ...} on stdout, exit 0; the reason becomes Claude's next
instruction) while either holds:
  - the candidate file (goals.json "candidate", optimize.py) differs from the candidate_sha of
    the last row of results.tsv, and, after a row that is not a keeper, from its committed version
    (run_experiment puts the best keeper, which is committed, back after a revert or a failed gate);
  - the last row's status is gate_fail, crash, timeout or tampered (the last thing tried is red;
    a wave (harness/wave.py) records its failed members first, so its last row is red only when
    every member failed);
  - a variant in candidates/ (*.py) has no row with its sha256: written for a wave, never measured.
With no results.tsv rows yet, it refuses only while the candidate differs from its committed
version (git) or a variant waits unmeasured, so a fresh checkout never traps a person who only
asked a question.

Who it applies to: the main agent (Stop) and the model-optimizer subagent (SubagentStop with
agent_type "model-optimizer"); other subagents (Explore, general-purpose) edit nothing and pass.
While the Stop payload's background_tasks lists work that will settle the candidate (a running
model-optimizer subagent, or a background shell running run_experiment.py or wave.py), the main agent may
stop: the candidate is that work's to record, and Claude Code wakes the main agent when it ends,
so the next Stop is gated again. Telling it to record or check out the file now would fight the
subagent that is editing it.

Loops: per the hooks docs, `stop_hook_active` is true when Claude is already continuing because
a Stop hook blocked. The gate then blocks at most AUTO_OPTIM_STOP_MAX_BLOCKS (default 3) times
in a row per agent (subagents send their parent's session_id, so the count is kept per agent_id
when the payload has one) and afterwards lets the stop through with a warning to the person
(JSON "systemMessage"), so an agent that cannot comply never spins forever.

Usage (what Claude Code does):  echo '{"hook_event_name": "Stop", ...}' | python3 harness/hooks/stop_gate.py
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _hooklib import CANDIDATES_DIR, OPTIMIZER_AGENT, candidate_name, project_root, read_payload, sha256_file  # noqa: E402

RED = ("gate_fail", "crash", "timeout", "tampered")
IN_FLIGHT = ("running", "pending")
KEEPERS = ("baseline", "keep")
RUN = ('python harness/run_experiment.py --desc "<one line: what you changed and why>" '
       "(one plain Bash command with dangerouslyDisableSandbox: true)")
WAVE = "python harness/wave.py {files} (one plain Bash command with dangerouslyDisableSandbox: true)"
# .git is read-only to the agent's shell (only run_experiment commits), so restore by reading git.
RESTORE = "git show HEAD:{name} > {name}"


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if any((v or "").strip() for v in r.values())]


def same_sha(current: str, recorded: str | None) -> bool:
    """results.tsv may hold the full hex digest or a prefix of it (at least 8 characters)."""
    recorded = (recorded or "").strip().lower()
    return len(recorded) >= 8 and current.startswith(recorded)


def problem(root: Path) -> str | None:
    """Why the turn may not end, or None."""
    rows = read_rows(root / "results.tsv")
    name = candidate_name(root)
    cand = root / name
    if not rows:
        if committed_differs(root, name):
            return (f"{name} differs from its committed version and no experiment is recorded yet. "
                    f"Record it (the first experiment becomes the baseline): {RUN} "
                    f"-- or drop the change with `{RESTORE.format(name=name)}`.")
        return unmeasured_variants(root, rows)
    last = rows[-1]
    exp, status = last.get("exp", "?"), (last.get("status") or "").strip()
    if not cand.is_file():
        return (f"{name} is missing. Restore the last kept version ({RESTORE.format(name=name)}), "
                f"then run: {RUN}")
    current = sha256_file(cand)
    # After anything but a keeper, run_experiment leaves the candidate at the best keeper, which is
    # the committed version (a keeper commits it; the baseline is a frozen file of its own).
    recorded = same_sha(current, last.get("candidate_sha")) or (
        status not in KEEPERS and not committed_differs(root, name))
    if not recorded:
        return (f"{name} has changed since the last recorded experiment {exp} (its sha256 {current[:12]} "
                f"is not in results.tsv), so this change is unmeasured. Record it now: {RUN} "
                f"-- or, to drop the change, restore the last kept version with `{RESTORE.format(name=name)}`. "
                "Then continue the loop in program.md.")
    if status in RED:
        desc = (last.get("desc") or "").strip()
        return (f"The last experiment {exp} ({desc!r}) ended with status {status}: the latest attempt is red. "
                f"Read its output (results.tsv, PROGRESS.md), fix the cause in {name} and run: {RUN} "
                f"-- or, if you abandon that idea, note it under Dead ends in PROGRESS.md and re-measure the "
                f'current best: python harness/run_experiment.py --desc "re-measure best after {exp}"')
    return unmeasured_variants(root, rows)


def unmeasured_variants(root: Path, rows: list[dict[str, str]]) -> str | None:
    """A wave's variant (candidates/*.py) that no row measured: written, never recorded."""
    folder = root / CANDIDATES_DIR
    recorded = [r.get("candidate_sha") for r in rows]
    files = sorted(folder.glob("*.py")) if folder.is_dir() else []
    new = [f for f in files if not any(same_sha(sha256_file(f), r) for r in recorded)]
    if not new:
        return None
    names = " ".join(f"{CANDIDATES_DIR}/{f.name}" for f in new)
    return (f"{names}: not measured yet (no row of results.tsv has its sha256). Measure them in one wave: "
            f"{WAVE.format(files=names)} -- or delete the ones you dropped.")


def committed_differs(root: Path, name: str) -> bool:
    """True when git can show the committed candidate and the file on disk differs from it."""
    try:
        p = subprocess.run(["git", "-C", str(root), "show", f"HEAD:./{name}"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if p.returncode != 0:
        return False  # no git, no commit, or the file is not tracked: nothing to compare with
    cand = root / name
    return not cand.is_file() or cand.read_bytes() != p.stdout


def counter_file(payload: dict) -> Path:
    """One block counter per agent: the session's, or the subagent's (same session_id, own agent_id)."""
    key = f"{payload.get('session_id', '')}-{payload.get('agent_id', '')}"
    safe = "".join(c for c in key if c.isalnum() or c in "-_")[:120] or "nosession"
    return Path(tempfile.gettempdir()) / f"auto-optim-stop-gate-{safe}.json"


def settles_candidate(task: dict) -> bool:
    """A background task still in flight that will edit or record the candidate."""
    if str(task.get("status", "")) not in IN_FLIGHT:
        return False
    command = str(task.get("command", ""))
    return task.get("agent_type") == OPTIMIZER_AGENT or "run_experiment.py" in command or "wave.py" in command


def gated(payload: dict) -> bool:
    """Whether this stop is the gate's business (see the docstring: who it applies to)."""
    if payload.get("hook_event_name") == "SubagentStop":
        return payload.get("agent_type") == OPTIMIZER_AGENT
    return not any(settles_candidate(t) for t in payload.get("background_tasks") or [] if isinstance(t, dict))


def main() -> int:
    payload = read_payload()
    if not gated(payload):
        return 0
    root = project_root(payload)
    reason = problem(root)
    counter = counter_file(payload)
    active = bool(payload.get("stop_hook_active"))
    if reason is None:
        counter.unlink(missing_ok=True)
        return 0
    blocks = 0
    if active:
        try:
            blocks = int(json.loads(counter.read_text()).get("blocks", 0))
        except (OSError, ValueError):
            blocks = 0
    limit = int(os.environ.get("AUTO_OPTIM_STOP_MAX_BLOCKS", "3"))
    if active and blocks >= limit:
        counter.unlink(missing_ok=True)
        print(json.dumps({"systemMessage": f"stop_gate: letting the turn end after {blocks} refusals in a row, "
                                           f"but the work is not recorded: {reason}"}))
        return 0
    counter.write_text(json.dumps({"blocks": blocks + 1}))
    print(json.dumps({"decision": "block", "reason": reason}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
