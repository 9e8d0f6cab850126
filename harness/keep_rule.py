"""The keep rule: the one place where an experiment becomes keep, revert or rerun.

Both halves of run_experiment call `judge`: the measuring side for what a record "would be", the
applying side (against results.tsv, under the records lock) for the row itself.

The measure. The current keeper (the code the candidate would replace; on a machine's first run,
the fp32 eager baseline) is measured again in the same experiment, in a worker of its own, its
timed calls alternating with the candidate's (harness/alternate.py). Each pair of calls gives one
speed ratio, keeper seconds over candidate seconds; the gain is the median of those ratios minus
one, and its confidence interval comes from the sign test's order statistics (distribution-free,
exact, no random numbers, so both halves get the same answer). Drift of the machine (a noisy
neighbour, a clock that moves) slows both members of a pair alike, so it neither fakes a win nor
hides one; a keeper that once measured with a wide spread costs nothing later, since its old
figures are not used.

The rule. Keep when the interval's lower end is above goals.json noise_threshold (the candidate is
faster by more than the threshold, at the printed confidence). Where goals.json has warmup_gain, a
candidate whose call is, at that confidence, no slower than the threshold and whose warm-up is
shorter than the keeper's by that fraction is kept too. Anything else is reverted, with the
reason on its row. A candidate that is the keeper's own source is a rerun, compared with its row.
Where the preset has a memory clause (goals.json "memory_gb") and the run was on a GPU, a
candidate is kept only if it passed that clause in a fresh worker of its own
(harness/memory_limit.py: facts["memory_check"]), however fast it is.

Without a keeper measured beside it (its source is nowhere, --best-median names a figure, or
another keep landed since it was measured: a wave) the candidate's own calls are compared with the
keeper's recorded figure, by the same test; that comparison cannot cancel drift, and the reason
says so.

A keeper is agent code too. One that runs slower beside a later candidate than on its own row (a
clock-triggered sleep, say) would carry any candidate over the line, a slower one included. So a
keeper whose calls beside the candidate take more than KEEPER_SLOWDOWN longer than its row's figure
is not trusted as the yardstick: the candidate is judged against that row's figure instead, and
the reason says why. Its warm-up likewise counts at the lesser of its recorded and its measured one.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.goals import as_goals
from harness.row import Row

CONFIDENCE = 0.95     # the interval printed and used, where the pairs allow it (below: the most they allow)
MIN_PAIRS = 6         # the fewest pairs whose widest interval reaches CONFIDENCE (1 - 2/2^6 = 96.9%)
KEEPER_SLOWDOWN = 0.10  # a keeper slower than its own row by more than this is not the yardstick


@dataclass(frozen=True)
class Comparison:
    """The candidate's speed against its keeper: gain 0.041 = 4.1% faster, with its interval."""
    gain: float
    low: float
    high: float
    confidence: float
    pairs: int
    paired: bool


@dataclass(frozen=True)
class Verdict:
    status: str                       # baseline, keep, revert, rerun
    reason: str
    comparison: Comparison | None = None
    reproduced: bool = False          # a rerun within the noise threshold of its keeper


def _coverage(n: int, k: int) -> float:
    """How often [x_(k), x_(n+1-k)] (1-based order statistics) holds the median of n draws."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


def interval(logs: list[float]) -> tuple[float, float, float, float]:
    """(median, low, high, confidence) of a median from its samples, by the sign test."""
    xs, n = sorted(logs), len(logs)
    k = 1
    while k + 1 <= n // 2 and _coverage(n, k + 1) >= CONFIDENCE:
        k += 1
    return statistics.median(xs), xs[k - 1], xs[n - k], _coverage(n, k)


def compare(times: list[float], keeper_times: list[float] | None = None,
            keeper_seconds: float | None = None) -> Comparison:
    """Paired (keeper_times[i] beside times[i]) or against one recorded figure (keeper_seconds)."""
    if keeper_times is not None:
        pairs = list(zip(keeper_times, times))
    else:
        pairs = [(keeper_seconds, t) for t in times]
    logs = [math.log(k / t) for k, t in pairs if k and t and k > 0 and t > 0]
    if not logs:
        raise ValueError("no timed calls to compare")
    mid, low, high, conf = interval(logs)
    return Comparison(math.exp(mid) - 1, math.exp(low) - 1, math.exp(high) - 1, conf, len(logs), keeper_times is not None)


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def describe(c: Comparison) -> str:
    what = f"{c.pairs} {'alternating pairs' if c.paired else 'calls against the recorded figure'}"
    return f"{c.confidence:.0%} CI {_pct(c.low)}..{_pct(c.high)}, {what}"


def verdict(c: Comparison, noise: float, warmup: tuple[float, float, float] | None = None,
            keeper: str = "the keeper", why_unpaired: str | None = None) -> Verdict:
    """keep / revert from a comparison: the rule of the module docstring. why_unpaired: what the
    reason says of a comparison against the recorded figure (by default: drift is not cancelled)."""
    ci = describe(c)
    drift = "" if c.paired else f"; {why_unpaired or 'not measured beside it, so drift of the machine is not cancelled'}"
    if c.low > noise:
        return Verdict("keep", f"kept: faster than {keeper} by {c.gain:.1%} ({ci}), beyond the {noise:.0%} "
                               f"noise threshold{drift}", c)
    if warmup is not None and c.low >= -noise and warmup[0] <= (1 - warmup[2]) * warmup[1]:
        return Verdict("keep", f"kept for its warm-up: {warmup[0]:.1f} s against {keeper}'s {warmup[1]:.1f} s, "
                               f"the call no slower beyond the {noise:.0%} noise threshold ({ci}){drift}", c)
    if c.high < -noise:
        why = f"slower than {keeper} by {-c.gain:.1%} ({ci})"
    elif c.low > 0:
        why = f"faster than {keeper} by {c.gain:.1%}, but not surely beyond the {noise:.0%} noise threshold ({ci})"
    else:
        why = (f"difference {_pct(c.gain)} against {keeper} is inside the noise ({ci}): this run cannot tell "
               f"a gain of more than {noise:.0%}")
    return Verdict("revert", f"reverted: {why}{drift}", c)


def rerun(value: float, keeper_value: float, noise: float, keeper: str) -> Verdict:
    """The keeper's own source measured again: how far from its row, against the noise threshold."""
    change = value / keeper_value - 1
    ok = abs(change) <= noise
    return Verdict("rerun", f"re-run of {keeper} ({keeper_value:.4g}): {change:+.2%}, "
                            f"{'within' if ok else 'OUTSIDE'} the {noise:.0%} noise threshold", None, ok)


@dataclass(frozen=True)
class Keeper:
    """What a candidate is judged against: a keeper's row (exp, source hash, metric)."""
    exp: str
    sha: str
    value: float


def judge(facts: dict[str, Any], metric: float, noise: float, better: str, keeper: Keeper | None, *,
          rerun_of: Keeper | None = None, figure: float | None = None,
          warmup: tuple[float, float, float] | None = None, memory_gb: float | None = None) -> Verdict:
    """The verdict on one measured candidate: the keep rule, in one place.

    facts: the candidate's (times_s, median_s, warmup_s; "paired" when its keeper ran beside it).
    keeper: the current keeper, None for a baseline. rerun_of: the keeper whose source the
    candidate is. figure: a metric to beat in place of the keeper's (--best-median). warmup: (the
    candidate's warm-up s, the keeper's as recorded or None, goals.json warmup_gain), or None.
    memory_gb: the preset's memory clause where it applies (a GPU run), or None."""
    if keeper is None and figure is None:
        return Verdict("baseline", "")
    if rerun_of is not None:
        return rerun(metric, rerun_of.value, noise, rerun_of.exp)
    times = [float(t) for t in facts.get("times_s") or [facts["median_s"]]]
    paired = facts.get("paired") or {}
    name = keeper.exp if keeper is not None and figure is None else "the given figure"
    value = figure if figure is not None else keeper.value
    seconds = value if better == "lower" else metric * float(facts["median_s"]) / value  # work / figure
    why_unpaired = None
    if figure is None and keeper is not None and paired.get("keeper_sha") and keeper.sha \
            and (keeper.sha.startswith(paired["keeper_sha"]) or paired["keeper_sha"].startswith(keeper.sha)):
        keeper_times = [float(t) for t in paired["keeper_times_s"]]
        slowdown = statistics.median(keeper_times) / seconds - 1
        if slowdown > KEEPER_SLOWDOWN:
            c = compare(times, keeper_seconds=seconds)
            why_unpaired = (f"{keeper.exp} ran {slowdown:.0%} slower beside it than on its own row, beyond the "
                            f"{KEEPER_SLOWDOWN:.0%} a keeper may drift, so the candidate is judged against that "
                            f"row's figure (re-run {keeper.exp} to measure it again)")
        else:
            c = compare(times, keeper_times)
        if warmup is not None and paired.get("keeper_warmup_s"):  # measured beside it, this run
            warmup = (warmup[0], min(x for x in (warmup[1], float(paired["keeper_warmup_s"])) if x), warmup[2])
    else:
        c = compare(times, keeper_seconds=seconds)
    if warmup is not None and not warmup[1]:
        warmup = None
    v = verdict(c, noise, warmup, name, why_unpaired)
    if not c.paired and facts.get("paired_error"):  # why it was not measured beside its keeper
        v = Verdict(v.status, f"{v.reason} ({facts['paired_error']})", c)
    missed = _memory_missed(facts.get("memory_check"), memory_gb)
    if v.status == "keep" and missed:
        v = Verdict("revert", f"reverted: {missed}; on speed alone it would be {v.reason.removeprefix('kept: ')}", c)
    return v


def _memory_missed(fit: dict[str, Any] | None, memory_gb: float | None) -> str:
    """Why a candidate fails the preset's memory clause (harness/memory_limit.py), "" if it passed
    or the preset has none."""
    if memory_gb is None:
        return ""
    if fit is None or fit["gb"] != memory_gb:
        return f"its run has no check of the preset's {memory_gb:g} GB memory clause"
    return "" if fit["passed"] else f"it failed the {memory_gb:g} GB memory clause ({fit['reason']})"


# --- from results.tsv rows and records to judge()'s arguments ------------------------------------

def keeper_of(row: dict[str, Any] | None) -> Keeper | None:
    """A results.tsv row (records.Row), or the first run's baseline not yet a row, as a Keeper."""
    if row is None:
        return None
    metric = row.get("metric")
    value = float(metric) if isinstance(metric, (int, float)) else Row.of(row).metric_value
    return Keeper(row["exp"], str(row.get("candidate_sha") or ""), value)


def is_rerun(candidate_sha: str, row: dict[str, Any] | None) -> bool:
    """The candidate is this keeper's source, measured again."""
    return row is not None and row["status"] == "keep" and candidate_sha.startswith(row["candidate_sha"])


def rerun_of(candidate_sha: str, best: dict[str, Any] | None, current: dict[str, Any] | None) -> dict[str, Any] | None:
    """The keeper the candidate re-runs: the best, or the current one (kept by the warm-up rule)."""
    return next((k for k in (best, current) if is_rerun(candidate_sha, k)), None)


def warmup_tie(goals: dict[str, Any], facts: dict[str, Any], keeper: dict[str, Any] | None,
               records: Path | None = None) -> tuple[float, float, float] | None:
    """judge()'s warm-up argument: this run's warm-up (build + first calls, in a fresh worker with
    empty compiler caches) against the current keeper's (the code the candidate would replace), from
    its record; None when goals.json asks for no warm-up rule ("warmup_gain") or a figure is missing.
    A keeper measured beside the candidate brings its own warm-up instead (judge)."""
    gain = as_goals(goals).warmup_gain
    if not gain or keeper is None or facts.get("warmup_s") is None:
        return None
    theirs = keeper.get("warmup_s")  # a baseline measured in this same run has no record yet
    if theirs is None and records is not None:
        try:
            theirs = json.loads((records / f"{keeper['exp']}.json").read_text())["facts"]["warmup_s"]
        except (OSError, ValueError, KeyError, TypeError):
            theirs = None
    paired = facts.get("paired") or {}
    if theirs is None and not paired.get("keeper_warmup_s"):
        return None
    return float(facts["warmup_s"]), (float(theirs) if theirs else None), float(gain)


def judge_record(rec: dict[str, Any], goals: dict[str, Any], best: dict[str, Any] | None,
                 current: dict[str, Any] | None, figure: float | None = None,
                 records: Path | None = None) -> Verdict:
    """judge() for a record (run_experiment's measuring half, and its apply against results.tsv):
    the current keeper is what the candidate is judged against; the best matters only for reruns."""
    goals = as_goals(goals)
    facts = rec["facts"]
    of = None if figure is not None else rerun_of(rec["candidate_sha"], best, current)
    warm = None if figure is not None else warmup_tie(goals, facts, current, records)
    preset = goals.presets.get(rec.get("preset"))
    memory_gb = preset.memory_gb if preset is not None and rec.get("device") == "cuda" else None
    return judge(facts, rec["metric"], goals.noise, goals.better, keeper_of(current),
                 rerun_of=keeper_of(of), figure=figure, warmup=warm, memory_gb=memory_gb)
