"""The keep rule on a simulated busy machine (issue 43, item 1): thousands of experiments, each six
pairs of calls timed in alternation as harness/measure/alternate.py times them, on a machine whose speed
jitters call to call, drifts, and is taken by busy loops that start and stop at random moments.
The code is the same as the keeper's, 30% faster or 30% slower, and keep_rule.judge decides.

Identical code is never kept and never "slower by X%"; a 30% faster candidate is never reverted and
a 30% slower one never kept, anywhere; where the load leaves the pairs readable they are judged
right nearly every time. The real machine's version, on the toy target under busy loops, is in
test_keep_noise.py.
"""

from __future__ import annotations

import math
import random
import zlib
from collections import Counter
from dataclasses import dataclass

from harness.decide import keep_rule as K
from harness.measure.alternate import balanced

KEEPER = K.Keeper("e010", "ab" * 8, 1.0)  # its row: 1.0 s a call, measured on a quiet machine
SAME, FASTER, SLOWER = 1.0, 1 / 1.3, 1.3    # the candidate's seconds a call, the keeper's being 1


@dataclass(frozen=True)
class Load:
    """What the machine does to a call. Busy loops start (a Poisson process, `starts` a keeper
    call) and each runs for an exponential time (`lasts` keeper calls); each one running slows a
    call by `cost`. The speed also jitters call to call (lognormal, `jitter`) and drifts
    (a slow sine, `drift`)."""
    jitter: float
    drift: float = 0.0
    starts: float = 0.0
    lasts: float = 1.0
    cost: float = 0.5


SCENARIOS = {  # name: (load, whether the pairs stay readable: ±30% judged right nearly every time)
    "quiet": (Load(jitter=0.005), True),
    "jitter 1%": (Load(jitter=0.01), True),
    "jitter 3%": (Load(jitter=0.03), True),
    "drifting": (Load(jitter=0.01, drift=0.3), False),
    "rare long bursts": (Load(jitter=0.01, starts=0.05, lasts=20.0, cost=0.4), False),
    "busy loops at random": (Load(jitter=0.02, starts=0.3, lasts=3.0, cost=0.6), False),
    "short bursts": (Load(jitter=0.02, starts=1.0, lasts=0.4, cost=1.0), False),
    "heavy": (Load(jitter=0.08, drift=0.5, starts=1.5, lasts=2.0, cost=1.5), False),
}


def experiment(load: Load, candidate_s: float, rng: random.Random, pairs: int = 6) -> dict:
    """One experiment's facts: `pairs` pairs, each in a random order, on the loaded machine."""
    now, running, phase = 0.0, [], rng.uniform(0, 2 * math.pi)
    next_start = rng.expovariate(load.starts) if load.starts else math.inf

    def call(work: float) -> float:
        nonlocal now, next_start
        while next_start <= now:  # busy loops that started before this call
            running.append(next_start + rng.expovariate(1 / load.lasts))
            next_start += rng.expovariate(load.starts)
        running[:] = [end for end in running if end > now]
        slow = (1 + load.cost * len(running)) * (1 + load.drift * math.sin(phase + now / 8))
        seconds = work * slow * math.exp(rng.gauss(0, load.jitter))
        now += seconds
        return seconds

    keeper, cand = [], []
    for keeper_first in balanced(pairs, rng):  # the order harness/measure/alternate.py times the pairs in
        if keeper_first:
            keeper.append(call(1.0))
            cand.append(call(candidate_s))
        else:
            cand.append(call(candidate_s))
            keeper.append(call(1.0))
    return {"times_s": cand, "median_s": sorted(cand)[pairs // 2],
            "paired": {"keeper_sha": KEEPER.sha, "keeper_times_s": keeper}}


def verdicts(load: Load, candidate_s: float, runs: int, seed: int) -> Counter:
    rng = random.Random(seed)
    out: Counter = Counter()
    for _ in range(runs):
        facts = experiment(load, candidate_s, rng)
        v = K.judge(facts, facts["median_s"], 0.01, "lower", KEEPER)
        out["slower by" if v.status == "revert" and v.reason.startswith("reverted: slower than") else v.status] += 1
    return out


RUNS = 2000  # per scenario and candidate: 48,000 simulated experiments, a few seconds
# Load that takes every call of one member and none of the other's (bursts that double a call, hitting
# half the calls) reads like a candidate twice as slow: in at most one run of 4096 (each pair hit on
# that side with odds 1/4), whatever the rule. 200,000 runs a scenario found it at most 1 in 4,000
# (a 30% faster candidate reverted in "heavy"); never for identical code (report of issue 43).
FLOOR = 1 / 1000


def test_identical_code_is_never_kept_nor_slower_by_x() -> None:
    for name, (load, _) in SCENARIOS.items():
        got = verdicts(load, SAME, RUNS, seed=zlib.crc32(name.encode()))
        assert got["keep"] == 0 and got["slower by"] == 0, (name, got)


def test_thirty_percent_is_judged_right() -> None:
    for name, (load, readable) in SCENARIOS.items():
        faster = verdicts(load, FASTER, RUNS, seed=1 + zlib.crc32(name.encode()))
        slower = verdicts(load, SLOWER, RUNS, seed=2 + zlib.crc32(name.encode()))
        assert slower["keep"] == 0, (name, slower)  # the wrong way round: never, wherever
        wrong = faster["revert"] + faster["slower by"]
        assert wrong <= FLOOR * RUNS and (wrong == 0 or not readable), (name, faster)
        if readable:  # judged right nearly every time; the rest inconclusive, never the wrong way round
            assert faster["keep"] >= 0.85 * RUNS and slower["revert"] + slower["slower by"] >= 0.85 * RUNS, \
                (name, faster, slower)
def test_the_issues_runs_end_inconclusive() -> None:
    """Issue 43's two runs on a 2-core machine at load 3-19. A comment-only change, its keeper 69%
    slower beside it than on its row: reverted "slower by 34.9%" against the recorded figure; now
    inconclusive, not kept, and no figure. A noise keep, "faster by 11.3% (97% CI +1.2%..+93.8%)":
    the pairs spread 91.5% (1.938 / 1.012), wider than the 1.2% gain they all show: inconclusive."""
    keeper = [1.69 * t for t in (1.0, 1.3, 0.8, 1.9, 1.1, 1.6)]
    facts = {"times_s": [1.0, 1.4, 1.9, 2.4, 1.2, 2.2], "median_s": 1.9,
             "paired": {"keeper_sha": KEEPER.sha, "keeper_times_s": keeper}}
    v = K.judge(facts, 1.9, 0.01, "lower", KEEPER)
    assert v.status == "inconclusive" and v.reason.startswith("inconclusive: not kept, run again on a quieter machine")
    assert "slower beside it than on its own row" in v.reason and "by " not in v.reason.split(":")[2], v.reason
    gains = [0.012, 0.05, 0.09, 0.136, 0.30, 0.938]  # six pairs, all faster, the widest 93.8%
    keeper = [1.0] * 6
    facts = {"times_s": [1 / (1 + g) for g in gains], "median_s": 0.9,
             "paired": {"keeper_sha": KEEPER.sha, "keeper_times_s": keeper}}
    v = K.judge(facts, 0.9, 0.01, "lower", KEEPER)
    assert v.status == "inconclusive" and "+1.2%..+93.8%" in v.reason and "spread 91.5% wide" in v.reason, v.reason


def test_half_the_pairs_time_the_keeper_first() -> None:
    """A steady drift slows the second call of each pair: balanced, it cannot line up six pairs."""
    assert all(sorted(balanced(6)) == [False] * 3 + [True] * 3 for _ in range(50))
    assert len({tuple(balanced(6)) for _ in range(200)}) > 10 and sum(balanced(7)) in (3, 4)  # drawn, not fixed



def test_a_large_gain_is_weighed_as_a_ratio() -> None:
    """Every pair 2.5 to 5.5 times as fast (a fast candidate's millisecond calls jitter; the keeper's
    steady): kept. Speeds combine by ratios: as a difference, +150%..+450% is "300 points wide,
    more than the 150% gain every pair shows", and a real 3x gain was never kept (the fresh
    attacker's honest control, 100x faster than its keeper, was inconclusive). A spread of the
    candidate's own calls wider than the gain is still noise."""
    keeper = [0.0135] * 6
    candidate = [0.0054, 0.00245, 0.0040, 0.0045, 0.0031, 0.0036]
    c = K.compare(candidate, keeper)
    assert c.low >= 1.5 and c.high - c.low > c.low and K.verdict(c, 0.01).status == "keep", K.verdict(c, 0.01).reason
    keeper = [0.0100] * 6
    candidate = [0.0060, 0.0061, 0.0062, 0.0060, 0.0061, 0.0063]
    keeper[2] = 0.0210  # the keeper's calls spread 110%, more than the +61% gain
    c = K.compare(candidate, keeper)
    assert c.low > 0.5 and K.verdict(c, 0.01).status == "inconclusive", K.verdict(c, 0.01).reason
