"""What a person reads at the end of a run: each row in plain words, the stop rule, this machine's rows and what their statuses mean, then what to do next."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness import machine, paths, _common
from harness.ledger import rows as R
from harness.ledger.results import rows as recorded_rows
from harness.ledger.rows import RED, Row
from harness.ledger.store import Store


def seconds(s: float) -> str:
    """A duration in plain digits: a spread below a millisecond in ms, never as 9.4e-05 s."""
    return f"{s:.4g} s" if s >= 1e-3 else f"{s * 1e3:.2g} ms"


def timing_line(r: dict[str, Any], goals: dict[str, Any], base: dict[str, Any] | None) -> str:
    """The median, the range and spread of the timed calls it came from, and the quality (the worst
    of the checked outputs); for a keeper, the ratio to the baseline in force. Whether it is a gain
    is the verdict's to say (harness/decide/keep_rule.py), and nothing here says otherwise."""
    row, spec = r["row"], goals.metric_spec
    line = f"  {row['median_s']:.4g} s per call (median of the timed calls)"
    if goals.better == "higher" and row.get("metric") is not None:
        line += f" = {row['metric']:.4g} {spec.get('unit', '')}"
    if r.get("range_s"):
        lo, hi = r["range_s"]
        line += f"; the calls ranged {lo:.4g}-{hi:.4g} s (spread {seconds(hi - lo)}, {(hi - lo) / row['median_s']:.0%} of the median)"
    if row.get("quality") is not None:
        checked = r.get("calls_checked")
        line += (f"; {goals.quality_name} {row['quality']:.4g} against the reference"
                 + (f" (the worst of {checked} checked outputs)" if checked else ""))
    if row.get("speedup_vs_fp32") is not None and r["status"] == "keep" and base is not None:
        line += f"\n  {row['speedup_vs_fp32']:.2f}x the fp32 eager baseline's median on this machine ({base['exp']})"
    return line


MEANING = {
    "baseline": "the frozen model in fp32 eager (PyTorch defaults): the yardstick every speedup is over",
    "keep": "faster than the keeper timed beside it, beyond the noise: now the candidate file, committed",
    "revert": "no gain beyond the noise over the keeper beside it: the candidate file was put back",
    "inconclusive": "too noisy to tell: not kept, the candidate file put back; run it again on a quieter machine",
    "rerun": "a keeper's own code measured again",
    "gate_fail": "an output failed the gate (quality) or the checks",
    "crash": "the candidate raised, or its worker died",
    "timeout": "the build or a call took longer than allowed",
    "tampered": "a frozen file changed during the run: void",
}
SHOWN_ROWS = 12  # the last rows of this machine's comparison that a run's summary prints


def your_rows(rows: list[dict[str, Any]], goals: dict[str, Any], preset: str, gpu: str) -> list[str]:
    """This machine's rows since its baseline (the comparison in force), and what their statuses
    mean: what a first run's output ends with."""
    base = R.baseline_row(rows, preset, gpu)
    if base is None:
        return []
    mine = [r for r in rows[rows.index(base):] if r["preset"] == preset and r["gpu"] == gpu]
    unit = goals.metric_spec.get("unit", "")
    lines = [f"This machine's rows (preset {preset}, {gpu}) since the baseline {base['exp']}; results.tsv holds them "
             f"all, leaderboard.md ranks the keepers:"]
    if len(mine) > SHOWN_ROWS:
        lines.append(f"  ... {len(mine) - SHOWN_ROWS} earlier rows")
    for r in mine[-SHOWN_ROWS:]:
        row = Row.of(r)
        metric = f"{row.metric_value:.4g} {unit}".strip() if r["status"] not in RED else "-"
        speed = f"{row.speedup_vs_fp32:.2f}x" if row.speedup_vs_fp32 is not None and r["status"] not in RED else "-"
        lines.append(f"  {r['exp']}  {r['status']:<12}  {metric:>12}  {speed:>6}  {r['desc']}")
    lines.append("  (the x: the fp32 eager baseline's median over the row's, each timed at its own moment)")
    for status in dict.fromkeys(r["status"] for r in mine[-SHOWN_ROWS:]):
        lines.append(f"  {status}: {MEANING.get(status, '')}")
    return lines


def _run_command() -> str:
    """The command that runs this target again: no option for the default target, --target NAME for
    another of targets/, AUTO_OPTIM_GOALS=... for a goals file outside them."""
    run = "auto-optim run "
    where = _common.goals_path()
    folder = where.parent
    if where.name == "goals.json" and folder.parent == (_common.REPO / paths.TARGETS).resolve():
        try:
            default = paths.default_target()
        except paths.TargetError:
            default = None
        return run + ("" if folder.name == default else f"--target {folder.name} ") + '--desc "..."'
    return f"AUTO_OPTIM_GOALS={os.path.relpath(where, Path.cwd())} " + run + '--desc "..."'


def next_step(result: dict[str, Any], goals: dict[str, Any]) -> str:
    """What to do after this run, for this target, on this device, after this outcome."""
    row, status, exp = result["row"], result["status"], result["exp"]
    cand = goals["candidate"]
    command = _run_command()
    if status in RED:
        return (f"Next: fix what 'why' says above in {cand} and run again ({command}); the candidate's source stays "
                f"in records/{exp}.json (auto-optim records source {exp} prints it).")
    if status == "inconclusive":
        back = f" (auto-optim records source {exp} > {cand} brings it back first)" \
            if " restored to " in (result.get("note") or "") else ""
        return (f"Next: nothing was kept. Run the candidate again{back} when the machine is quieter (other jobs "
                f"stopped: `uptime` shows the load)" + (", or on a GPU machine." if machine.on_cpu(row["gpu"]) else "."))
    if str(goals.get("description", "")).startswith("REPLACE"):  # harness/cli/new_target.py's stand-in, as written
        return (f"Next: this target is still new_target.py's stand-in: replace its model, input and gate (README.md in "
                f"{_common.root().name}/), commit, then run {command}.")
    if machine.on_cpu(row["gpu"]):
        return (f"On a CPU the {row['preset']} preset checks the loop end to end; a CPU's speed says little about a GPU's. "
                f"Next: the same command on a GPU machine ({command}; README, 'On a GPU'), or let Claude Code run "
                f"the loop (README, 'Running it with Claude Code').")
    return (f"Next: read the keeper's profile (profiles/), change {cand}, run this again (program.md has the loop); "
            f"leaderboard.md ranks this machine's keepers.")


def summary(results: list[dict[str, Any]], goals: dict[str, Any]) -> list[str]:
    """The last lines of a run: what each row says, in plain words, this machine's rows with what
    they mean, and what to do next."""
    lines = []
    rows = recorded_rows()
    for r in results:
        row = r["row"]
        what = f"{r['exp']}: {r['status'].upper()}  {row['desc']}"
        if row.get("median_s") is not None:
            upto = rows[:next(i for i, x in enumerate(rows) if x["exp"] == r["exp"]) + 1]
            what += "\n" + timing_line(r, goals, R.baseline_row(upto, row["preset"], row["gpu"]))
        if r.get("reason"):
            what += f"\n  why: {r['reason']}"
        if r.get("verdict"):
            what += f"\n  {r['verdict']}"
        if r.get("note"):
            what += f"\n  {r['note']}"
        lines.append(what)
    last = results[-1]
    row = last["row"]
    if not machine.on_cpu(row["gpu"]):  # the stop rule's floor and profile figures mean nothing on a CPU
        from harness.decide import floor  # here: floor imports torch, which run_experiment's refusals need not load

        stop, why, best = floor.verdict_for_rows(rows, goals, row["preset"], row["gpu"], floor.load_peak(row["gpu"]),
                                                 _common.load_adapter(goals), Store.here().folder)
        lines.append(f"Stop rule (program.md section 7) on {best}: " + ("STOP, every condition holds." if stop
                     else "not yet:\n" + "\n".join(f"  - {w}" for w in why)))
    # What to do next comes last, where a person's eye lands after the rows (the key: value and JSON lines
    # that follow are for tools).
    return lines + your_rows(rows, goals, row["preset"], row["gpu"]) + [next_step(last, goals)]
