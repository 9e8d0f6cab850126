"""The keep rule: the one place where an experiment becomes keep, revert, inconclusive or rerun.

Both halves of run_experiment call `judge`: the measuring side for what a record "would be", the
applying side (against results.tsv, under the records lock) for the row itself. A wave orders its
members by the same rule (harness/cli/wave.py).

The measure. The current keeper (the code the candidate would replace; on a machine's first run,
the fp32 eager baseline) is measured again in the same experiment, in a worker of its own, its
timed calls alternating with the candidate's (harness/measure/alternate.py). Each pair of calls gives one
speed ratio, the keeper's seconds over the candidate's; the gain is the median of those ratios
minus one. Its interval comes from the sign test's order statistics: distribution-free, exact, no
random numbers, so both halves get the same answer. With 6 pairs, "97% CI" is the span from the
smallest to the largest of the six gains: the true median gain lies outside it only if all six
pairs fell on one side of it, which chance does in 2 runs of 64 (3%). With more pairs the interval
is the narrowest pair of order statistics that still holds 95%. Load that slows both calls of a
pair alike cancels; the old figures of a keeper are not used to judge.

The rule (goals.json noise_threshold T, 1%; low..high the printed interval of the gain; the noise
N: the wider of the interval, as a ratio ((1 + high) / (1 + low) - 1: speeds multiply, so pairs 2.5
and 4 times as fast are as far apart as pairs 10% and 76% faster), and of each member's own timed
calls (slowest over fastest, minus one), the spread a run prints):
  keep          low > T and N < low: the whole interval beyond the threshold, and the noise
                narrower than the gain every pair shows. A spread wider than the difference is one
                the pairs cannot see past: six pairs of the same code all come out faster by chance
                in one run of 64, and a burst of load can slow every call of one member, while a
                real gain moves every pair alike on a steady machine. Where goals.json has
                warmup_gain, a candidate whose call is surely no slower beyond T (low >= -T) and
                whose warm-up is shorter than the keeper's by that fraction is kept too.
  revert        high <= T: surely no gain worth keeping. The reason says "slower by X%" only when
                high < -T and N < 1 / (1 + high) - 1 (the same test, mirrored: the loss every pair
                shows, as a ratio); else "no faster than the keeper beyond T".
  inconclusive  anything else: the interval straddles the threshold, or lies beyond it with a
                noise wider than its gain. And whatever the pairs say, when the keeper, timed beside the
                candidate, ran more than KEEPER_SLOWDOWN (10%) slower than its own row: the machine
                is busier than when the keeper was measured (or the keeper slows itself down once it
                is the keeper: agent code too, tests/cheaters/slows_as_keeper.py), so nothing it
                measures now is trusted (a first run's baseline, measured in the same run, has no
                earlier row). Not kept, and never "slower by X%": "inconclusive: not kept, run again
                on a quieter machine". The candidate file is restored as after a revert; the
                candidate's source stays in its record (auto-optim records source EXP).
  A candidate that was not timed beside the current keeper is inconclusive too (the keeper failed
  beside it, or its source is nowhere), never judged against a figure recorded at another time. One
  timed beside an earlier keeper (a wave's member, after another member was kept) is judged against
  that one: a revert stays a revert; anything else is inconclusive, to be measured again beside the
  new keeper.
  A candidate that is the keeper's own source is a rerun, reported against its row. Where the preset
  has a memory clause (goals.json "memory_gb") and the run was on a GPU, a candidate is kept only if
  it passed that clause in a fresh worker of its own (harness/measure/memory_limit.py: facts["memory_check"]).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.goals import MIN_PAIRS, as_goals  # noqa: F401 - MIN_PAIRS: the rule's, kept with the bound it sets

from harness.ledger.rows import Row
from harness.errors import Refused

CONFIDENCE = 0.95     # the interval printed and used, where the pairs allow it (below: the most they allow)
KEEPER_SLOWDOWN = 0.10  # a keeper slower than its own row by more than this: the run is inconclusive
QUIETER = "run again on a quieter machine"


@dataclass(frozen=True)
class Comparison:
    """The candidate's speed against the keeper timed beside it: gain 0.041 = 4.1% faster, with its
    interval, and the noise the verdict weighs it against (the module docstring's N)."""
    gain: float
    low: float
    high: float
    confidence: float
    pairs: int
    calls_spread: float = 0.0  # the wider of the two members' own timed calls: slowest / fastest - 1

    @property
    def noise(self) -> float:
        """N: the interval's width as a ratio, or the calls' spread, whichever is wider."""
        return max((1 + self.high) / (1 + self.low) - 1, self.calls_spread)


@dataclass(frozen=True)
class Verdict:
    status: str                       # baseline, keep, revert, inconclusive, rerun
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


def compare(times: list[float], keeper_times: list[float]) -> Comparison:
    """The candidate's timed calls against the keeper's beside them: keeper_times[i] with times[i]."""
    kept = [(k, t) for k, t in zip(keeper_times, times) if k and t and k > 0 and t > 0]
    if not kept:
        raise ValueError("no timed pairs to compare")
    mid, low, high, conf = interval([math.log(k / t) for k, t in kept])
    spread = max(max(xs) / min(xs) - 1 for xs in zip(*kept))
    return Comparison(math.exp(mid) - 1, math.exp(low) - 1, math.exp(high) - 1, conf, len(kept), spread)


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def describe(c: Comparison) -> str:
    return f"{c.confidence:.0%} CI {_pct(c.low)}..{_pct(c.high)}, {c.pairs} alternating pairs"


def surely_faster(c: Comparison, noise: float) -> bool:
    """The whole interval beyond the threshold, and the run's noise narrower than its lower end."""
    return c.low > noise and c.noise < c.low


def surely_slower(c: Comparison, noise: float) -> bool:
    """The whole interval below -threshold, and the run's noise narrower than the loss at its upper end."""
    return c.high < -noise and c.noise < 1 / (1 + c.high) - 1


def verdict(c: Comparison, noise: float, warmup: tuple[float, float, float] | None = None,
            keeper: str = "the keeper") -> Verdict:
    """keep / revert / inconclusive from the pairs: the rule of the module docstring."""
    ci = describe(c)
    if surely_faster(c, noise):
        return Verdict("keep", f"kept: faster than {keeper} by {c.gain:.1%} ({ci}), beyond the {noise:.0%} "
                               f"noise threshold", c)
    if warmup is not None and c.low >= -noise and warmup[0] <= (1 - warmup[2]) * warmup[1]:
        return Verdict("keep", f"kept for its warm-up: {warmup[0]:.1f} s against {keeper}'s {warmup[1]:.1f} s, "
                               f"the call no slower beyond the {noise:.0%} noise threshold ({ci})", c)
    if c.high <= noise:
        why = (f"slower than {keeper} by {-c.gain:.1%} ({ci})" if surely_slower(c, noise) else
               f"no faster than {keeper} beyond the {noise:.0%} noise threshold ({ci})")
        return Verdict("revert", f"reverted: {why}", c)
    if c.low > noise:
        what = "the pairs spread" if (1 + c.high) / (1 + c.low) - 1 >= c.calls_spread else "the timed calls of one of them spread"
        why = (f"faster than {keeper} by {c.gain:.1%} ({ci}), but {what} {c.noise:.1%} wide, more than the "
               f"{c.low:.1%} gain every pair shows: noise, as far as this run can tell")
    else:
        why = (f"{_pct(c.gain)} against {keeper} ({ci}): the interval spans the {noise:.0%} noise threshold, so this "
               f"run cannot tell a gain beyond it from none")
    return inconclusive(f"{why}", QUIETER, c)


def inconclusive(why: str, then: str, c: Comparison | None = None) -> Verdict:
    """Not kept, and not a revert by any figure: what the run could not tell, and what to do."""
    return Verdict("inconclusive", f"inconclusive: not kept, {then}: {why}", c)


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

    def is_code(self, sha: str) -> bool:
        return bool(sha) and bool(self.sha) and (self.sha.startswith(sha) or sha.startswith(self.sha))


def judge(facts: dict[str, Any], metric: float, noise: float, better: str, keeper: Keeper | None, *,
          rerun_of: Keeper | None = None, beside: Keeper | None = None,
          warmup: tuple[float, float, float] | None = None, memory_gb: float | None = None) -> Verdict:
    """The verdict on one measured candidate: the keep rule, in one place.

    facts: the candidate's (times_s, median_s, warmup_s; "paired": the keeper timed beside it,
    "paired_error": why none was). keeper: the current keeper, None for a baseline. rerun_of: the
    keeper whose source the candidate is. beside: the earlier keeper it was timed beside, where
    that is not the current one (a wave's member after another member's keep). warmup: (the
    candidate's warm-up s, the keeper's as recorded or None, goals.json warmup_gain), or None.
    memory_gb: the preset's memory clause where it applies (a GPU run), or None."""
    if keeper is None:
        return Verdict("baseline", "")
    if rerun_of is not None:
        return rerun(metric, rerun_of.value, noise, rerun_of.exp)
    paired = facts.get("paired") or {}
    if not paired:
        why = facts.get("paired_error") or f"{keeper.exp}'s source was not found (its record, its commit)"
        return inconclusive(f"it was not timed beside {keeper.exp} ({why}), and nothing else judges it",
                            "run it again")
    yardstick = keeper if keeper.is_code(str(paired["keeper_sha"])) else beside
    if yardstick is None or not yardstick.is_code(str(paired["keeper_sha"])):
        return inconclusive(f"it was timed beside code ({paired['keeper_sha'][:8]}) that is no keeper of this "
                            f"comparison, not beside {keeper.exp}", "measure it again")
    times = [float(t) for t in facts.get("times_s") or [facts["median_s"]]]
    keeper_times = [float(t) for t in paired["keeper_times_s"]]
    c = compare(times, keeper_times)
    # The keeper's row, in seconds a call: for a throughput, the work of a call over its rate.
    row_s = yardstick.value if better == "lower" else metric * float(facts["median_s"]) / yardstick.value
    slowdown = statistics.median(keeper_times) / row_s - 1
    if slowdown > KEEPER_SLOWDOWN and not paired.get("baseline_now"):  # a first run's: measured now, its row to be
        return inconclusive(f"{yardstick.exp} ran {slowdown:.0%} slower beside it than on its own row, beyond the "
                            f"{KEEPER_SLOWDOWN:.0%} a keeper may drift: the machine is busier than when {yardstick.exp} "
                            f"was measured (or {yardstick.exp} slows itself down), so the pairs ({describe(c)}) are "
                            f"not trusted", QUIETER, c)
    if warmup is not None and paired.get("keeper_warmup_s"):  # measured beside it, this run
        warmup = (warmup[0], min(x for x in (warmup[1], float(paired["keeper_warmup_s"])) if x), warmup[2])
    if warmup is not None and not warmup[1]:
        warmup = None
    v = verdict(c, noise, warmup if yardstick is keeper else None, yardstick.exp)
    if yardstick is not keeper:  # a keep landed since it was measured
        since = f"{keeper.exp} has been kept since it was measured"
        if v.status == "revert":
            return Verdict("revert", f"{v.reason}; {since}", c)
        return inconclusive(f"timed beside {yardstick.exp} it was {_pct(c.gain)} ({describe(c)}), but {since} and it "
                            f"was not timed beside {keeper.exp}", f"measure it again beside {keeper.exp}", c)
    missed = _memory_missed(facts.get("memory_check"), memory_gb)
    if v.status == "keep" and missed:
        v = Verdict("revert", f"reverted: {missed}; on speed alone it would be {v.reason.removeprefix('kept: ')}", c)
    return v


def _memory_missed(fit: dict[str, Any] | None, memory_gb: float | None) -> str:
    """Why a candidate fails the preset's memory clause (harness/measure/memory_limit.py), "" if it passed
    or the preset has none."""
    if memory_gb is None:
        return ""
    if fit is None or fit["gb"] != memory_gb:
        return f"its run has no check of the preset's {memory_gb:g} GB memory clause"
    return "" if fit["passed"] else f"it failed the {memory_gb:g} GB memory clause ({fit['reason']})"


# --- from results.tsv rows and records to judge()'s arguments ------------------------------------

def keeper_of(row: dict[str, Any] | None) -> Keeper | None:
    """A results.tsv row (rows.Row), or the first run's baseline not yet a row, as a Keeper."""
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
        from harness.ledger.store import Store  # records/ is the store's to read
        try:
            theirs = Store(records).read(keeper["exp"]).facts.get("warmup_s")
        except Refused:  # no record, or one that cannot be read
            theirs = None
    paired = facts.get("paired") or {}
    if theirs is None and not paired.get("keeper_warmup_s"):
        return None
    return float(facts["warmup_s"]), (float(theirs) if theirs else None), float(gain)


def judge_record(rec: dict[str, Any], goals: dict[str, Any], best: dict[str, Any] | None,
                 current: dict[str, Any] | None, records: Path | None = None,
                 keepers: list[dict[str, Any]] | tuple = ()) -> Verdict:
    """judge() for a record (run_experiment's measuring half, and its apply against results.tsv):
    the current keeper is what the candidate is judged against; the best matters only for reruns;
    keepers (the keeper rows since the baseline) name the one it was timed beside, where a keep
    landed since."""
    goals = as_goals(goals)
    facts = rec["facts"]
    of = rerun_of(rec["candidate_sha"], best, current)
    warm = warmup_tie(goals, facts, current, records)
    preset = goals.presets.get(rec.get("preset"))
    memory_gb = preset.memory_gb if preset is not None and rec.get("device") == "cuda" else None
    sha = str((facts.get("paired") or {}).get("keeper_sha") or "")
    beside = next((keeper_of(k) for k in reversed(list(keepers)) if sha and keeper_of(k).is_code(sha)), None)
    return judge(facts, rec["metric"], goals.noise, goals.better, keeper_of(current),
                 rerun_of=keeper_of(of), beside=beside, warmup=warm, memory_gb=memory_gb)


def would_be(rec: dict[str, Any], goals: dict[str, Any], best: dict[str, Any] | None,
             current: dict[str, Any] | None) -> tuple[int, float, float]:
    """A measured record's place in a wave's judging order (harness/cli/wave.py), by this rule: the
    would-be keeps first, the surest gain (its interval's lower end) first among them; then the
    rest. Lower sorts first."""
    v = judge_record(rec, goals, best, current)
    c = v.comparison
    return (0 if v.status == "keep" else 1, -(c.low if c else -math.inf), -(c.gain if c else -math.inf))


def agreement(runs: list[tuple[str, list[float]]], noise: float) -> str:
    """Do several measurements of the same code (one per GPU: (gpu, timed seconds)) agree? Each
    median's interval by the same sign test: 'within' the noise threshold when all the intervals
    together span no more than it; 'OUTSIDE' when two lie apart by more than it; else 'cannot tell'
    (the intervals are wider than the threshold)."""
    spans = [interval([math.log(t) for t in times]) for _, times in runs if times]
    lows, highs = [s[1] for s in spans], [s[2] for s in spans]
    if max(highs) - min(lows) <= math.log1p(noise):
        return "within"
    if max(lows) - min(highs) > math.log1p(noise):
        return "OUTSIDE"
    return "cannot tell"
