"""Run one experiment: measure (the candidate beside its keeper) -> decide -> record (-> commit + profile).

Usage:
    auto-optim run --desc "bf16 weights" [--preset P] [--candidate FILE]
                                     [--device cpu|cuda] [--timeout S] [--no-profile] [--unsandboxed]
    auto-optim measure --desc "..." --record-out rec.json
    auto-optim apply rec.json
    add --rebaseline (a person, on purpose) to start a new comparison: a new baseline row first

The baseline. The first run on a machine (no baseline row yet for this preset and GPU model), or
a run with --rebaseline, first measures the frozen model's own fp32 eager forward
(harness/baselines/fp32_eager.py) and records it as the `baseline` row; then the candidate is
measured against it. So the first thing a user sees is a true ratio over fp32 eager.

The keep rule (harness/decide/keep_rule.py, the one place it is decided). The candidate is timed in
alternation with the code it would replace, the current keeper (the latest keep since the
baseline, whose source optimize.py holds; on a first run the baseline), each in a worker of its
own (harness/measure/alternate.py), and judged only against it: keep, revert, inconclusive or rerun, by
the rule harness/decide/keep_rule.py's docstring states (its one statement). A keeper's source becomes
optimize.py (goals.json "candidate") and is committed, then profiled in the same worker. Anything
else leaves optimize.py at the current keeper: after a revert, an inconclusive run or a failure of
an edited optimize.py it is put back, the candidate's source kept in its record
(`auto-optim records source EXP` prints it); a --candidate file is never modified. The best or the
current keeper's own source measured again (on a fresh machine, say) is a `rerun`, with its
distance from that keeper.

Every attempt writes exactly one record (harness/ledger/store.py: records/<exp>.json, its source
once by hash, every figure, the profile and quality strip of a keeper as files beside it), whose
row results.tsv gains (baseline, keep, revert, inconclusive, rerun, gate_fail, crash, timeout,
tampered, with the experiment's wall time and the sandbox it ran in), regenerates leaderboard.md and this machine's progress/<preset>-<machine>.png and adds a
line to PROGRESS.md.

Tamper check: the frozen files (harness/, model/, goals.json) are hashed before and after; a
change during the run voids it (status `tampered`, nothing kept or committed). A run refuses to
start when the frozen files differ from the baseline's.

Locks (runs/; harness/measure/locks.py): one experiment or wave per checkout, one measurement per GPU;
records.lock: held by apply from reading the records to the last write, so writers that finish
together stay whole.

Record-file mode, for a GPU machine without .git: --measure-only measures (and profiles a
would-be keeper, judged against the keeper timed beside it) and writes a JSON record,
signed with the person's key (harness/ledger/signing.py; give that machine a copy of the key folder
through AUTO_OPTIM_KEY_DIR); --apply does the bookkeeping half in the git checkout, for a record
that key signed only, and checks every field of it (read_record_file, record.check_measured).
--apply, --record-out, --measure-only, --unsandboxed and --rebaseline are the person's (harness/cli/person.py,
`auto-optim`): the agent runs experiments only through its door (harness/cli/door.py, request.json), and
Claude Code's hook lets nothing else out of its sandbox (agent/hooks/guard_frozen.py).
The candidate is read without following a link (harness/sandbox/snapshot.py), and the worker imports the
bytes the harness read.
Exit: 0 measured and recorded (baseline, keep, revert, inconclusive, rerun: the candidate passed every check,
whatever the decision), 1 recorded but the candidate failed (gate_fail, crash, timeout, tampered),
2 refused (nothing recorded), 130 interrupted (Ctrl-C; nothing recorded for the run in progress).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from harness import console, frozen, hashing, machine, paths, _common
from harness.decide import keep_rule
from harness.sandbox import snapshot
from harness.cli import experiment_pair, keepers
from harness.measure.locks import acquire_lock, device_lock
from harness.ledger import rows as R
from harness.ledger.apply import apply, check_committed, check_frozen, git_repo
from harness.errors import Refused
from harness.ledger.results import check_complete, rows as recorded_rows
from harness.ledger.summary import summary
from harness.cli.prepare import DISK_ERRORS, disk_error
from harness.ledger.record_file import check_record_out, read_record_file, write_record_file



rerun_of = keep_rule.rerun_of


# --- the measuring half ------------------------------------------------------------------------

def measure(a: argparse.Namespace, goals: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU half: a baseline record first when this machine has none, then the candidate's.
    The candidate is timed in alternation with the code it would replace (harness/measure/alternate.py):
    the current keeper, or on a first run the baseline itself; alone when it re-runs a keeper
    (harness/decide/keep_rule.py: a candidate is judged only against its keeper
    timed beside it, never against a figure recorded at another time)."""
    if a.best_median is not None:
        raise Refused("--best-median is not used any more: a candidate is judged only against its keeper timed beside "
                      "it (harness/decide/keep_rule.py), never against a figure; measure without it")
    cand = Path(os.path.abspath(a.candidate)) if a.candidate else _common.root() / goals["candidate"]
    try:  # no link followed (harness/sandbox/snapshot.py); the session reads it so too, and sends the worker its bytes
        source = snapshot.read(cand, _common.root())
    except FileNotFoundError:
        raise Refused(f"candidate file not found: {cand}") from None
    except snapshot.nofollow.NotPlain as e:
        raise Refused(str(e)) from None
    device = a.device or machine.default_device()
    preset = _common.pick_preset(goals, a.preset, device)
    rows = recorded_rows()
    gpu = machine.env_info(device, goals.presets[preset].ranks)["gpu"]
    hashed = frozen.frozen_files()
    fh = frozen.frozen_hash(hashed)
    code = code_files(hashed)
    base = R.baseline_row(rows, preset, gpu)
    first = a.rebaseline or base is None
    if not first:
        check_frozen(base, fh)
    better = goals.better
    best = None if first else R.best_row(rows, preset, gpu, better)
    current = None if first else R.current_row(rows, preset, gpu)
    keeper_dir = None
    if first:
        keeper = keepers.BASELINE
    elif rerun_of(hashing.sha256_bytes(source)[:16], best, current):
        keeper = None
    else:
        keeper, keeper_dir = keepers.keeper_file(current, goals)
        if keeper is None:
            raise Refused(f"the current keeper {current['exp']}'s source is in neither records/{current['exp']}.json nor "
                          f"its commit {current['commit']}, so the candidate cannot be timed beside it; restore records/ "
                          f"(auto-optim records restore), or (a person) start a new comparison with --rebaseline")
    t0 = time.perf_counter()
    try:
        recs = experiment_pair.measure_files(a, goals, preset, device, fh, keeper, cand, first, (best, current))
    finally:
        if keeper_dir is not None:
            shutil.rmtree(keeper_dir, ignore_errors=True)
    if any(r["candidate_file"] == str(cand) and r.get("source") not in (None, source.decode(errors="replace"))
           for r in recs):
        raise Refused(f"{cand.name} changed while it was being measured (read twice, two versions). Nothing "
                      "recorded; run it again and leave the file alone until it finishes.")
    after = code_files(frozen.frozen_files())
    if after != code:
        changed = sorted(k for k in set(code) | set(after) if code.get(k) != after.get(k))
        kind = "frozen" if changed[0] in hashed else "harness"
        for rec in recs:
            rec.update(outcome="tampered", reason=f"{kind} file {changed[0]} changed during the run "
                       f"({len(changed)} changed); the run is void")
    if first and recs[0]["outcome"] != "measured":
        recs = recs[:1]  # without a baseline there is nothing to judge the candidate against
    for rec in recs:
        rec["wall_s"] = time.perf_counter() - t0
    return recs


def code_files(frozen_files: dict[str, str]) -> dict[str, str]:
    """What the tamper check compares before and after a run: the frozen files and every other file
    of the harness (frozen.every_harness_file: the frozen hash leaves out the commands and the
    ledger, which say what a row means but do not measure it; a run during which any of them
    changes is void all the same)."""
    out = dict(frozen_files)
    for f in frozen.every_harness_file():
        out.setdefault(str(Path("harness") / f.relative_to(frozen.HARNESS)), hashing.sha256_file(f))
    return out


def parser() -> argparse.ArgumentParser:
    """The options (harness/cli/person.py reads the person's powers from what this parser makes)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("--desc", help="what this experiment changes (required unless --apply)")
    p.add_argument("--preset")
    p.add_argument("--candidate", type=Path, help="default: goals.json's candidate (optimize.py); never modified")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--timeout", type=_common.seconds, help="seconds allowed for the build and for each call")
    p.add_argument("--no-profile", action="store_true", help="skip profiling a keeper")
    p.add_argument("--unsandboxed", action="store_true",
                   help="run the candidate without a sandbox where none can be had (the row says so)")
    p.add_argument("--rebaseline", action="store_true",
                   help="a person starts a new comparison: a fresh fp32 eager baseline row, then the candidate")
    p.add_argument("--measure-only", action="store_true", help="measure, write --record-out, record nothing")
    p.add_argument("--record-out", type=Path)
    p.add_argument("--best-median", type=float, help="with --measure-only: the best metric to beat")
    p.add_argument("--apply", type=Path, metavar="RECORD.json", help="record a --measure-only result here")
    return p


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))


def run(a: argparse.Namespace) -> int:
    """One experiment, a --measure-only record or an --apply, as parsed (harness/cli/door.py builds its
    Namespace from request.json, never from a command line)."""
    try:
        goals = _common.load_goals()
        # Measuring alone (a wave member, a cloud run) records nothing: it needs only its GPU.
        lock = None if a.measure_only else acquire_lock()
        if not a.measure_only:
            check_committed(git_repo(), goals)
        if a.apply:
            recs = read_record_file(a.apply, goals)
        else:
            if not a.desc or not a.desc.strip():
                raise Refused("--desc is required: say what this experiment changes")
            if a.measure_only and not a.record_out:
                raise Refused("--measure-only needs --record-out FILE.json")
            if a.record_out:
                check_record_out(a.record_out)
            if not a.measure_only:
                check_complete()  # before minutes of measuring: apply checks again under its lock
            preset = _common.pick_preset(goals, a.preset, a.device or machine.default_device())
            with device_lock(goals.presets[preset].ranks):
                recs = measure(a, goals)
            for rec in recs:
                rec["no_profile"] = a.no_profile
            if a.measure_only:
                write_record_file(a.record_out, recs)
                console.emit([f"record written to {a.record_out}: " + ", ".join(f"{r['desc']!r} {r['outcome']}"
                        + (f" (would be {r['would_be']})" if "would_be" in r else "") for r in recs),
                        f"apply it in the git checkout: auto-optim apply {a.record_out.name}"],
                       {"record": str(a.record_out), "outcomes": [r["outcome"] for r in recs]})
                return 0
        results, code = [], 0
        for rec in recs:
            done, facts = apply(rec, goals, a.rebaseline and rec is recs[0])
            code = max(code, done)
            results.append(facts)
        lock.close()
    except Refused as e:
        print(f"run_experiment: refused: {e}", file=sys.stderr)
        console.emit([f"REFUSED: {e}"], {"status": "refused", "reason": str(e)})
        return 2
    except OSError as e:  # the disk or its permissions (records, results.tsv, a keeper's copy): not the candidate's
        if e.errno not in DISK_ERRORS:
            raise
        why = (f"{disk_error(e)}; the rows recorded before it stay (auto-optim records restore puts back "
               f"what a half-written experiment left out of results.tsv or records/)")
        print(f"run_experiment: {why}", file=sys.stderr)
        console.emit([f"REFUSED: {why}"], {"status": "refused", "reason": why})
        return 2
    last = results[-1]
    console.emit(summary(results, goals), {"exp": last["exp"], "status": last["status"], "exps": [r["exp"] for r in results],
                                     **{k: v for k, v in last["row"].items() if k not in ("exp", "status")},
                                     "best_before": last["best"]["exp"] if last["best"] else None,
                                     "reason": last.get("reason"), "restore": last.get("note"), "verdict": last.get("verdict")})
    return code


if __name__ == "__main__":
    from harness.cli import person

    person.refuse_agent(parser(), sys.argv[1:], "harness/cli/run_experiment.py")
    sys.exit(console.run_cli(main, "run_experiment", "nothing recorded for the experiment in progress; "
                                               "the rows recorded before it stay"))
