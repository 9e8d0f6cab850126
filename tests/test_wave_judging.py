"""A wave judges by the keep rule itself (issue 43, item 1): its members are ordered by what the rule
would say of each beside the keeper it was timed beside (the surest keep first: the interval's lower
end), not by medians measured on different GPUs at different moments; and its fairness line compares
the GPUs by the same intervals, within / OUTSIDE / cannot tell, never a max-min of medians alone.
"""

from __future__ import annotations

from harness.decide import keep_rule as K
from harness.cli import wave

KEEPER = {"exp": "e010", "status": "keep", "candidate_sha": "ab" * 8, "metric": 1.0, "median_s": "1.0"}
GOALS = {"noise_threshold": 0.01, "presets": {"tiny": {}}}


def member(k: int, gains: list[float], outcome: str = "measured") -> dict:
    times = [1 / (1 + g) for g in gains]
    facts = {"times_s": times, "median_s": sorted(times)[3],
             "paired": {"keeper_sha": KEEPER["candidate_sha"], "keeper_times_s": [1.0] * len(gains)}}
    return {"k": k, "rec": {"outcome": outcome, "metric": facts["median_s"], "facts": facts, "preset": "tiny",
                            "candidate_sha": f"{k:016x}"}}


def test_members_are_judged_in_the_keep_rules_order() -> None:
    """b's median is the lowest (a 60% gain, once), but its pairs spread 1%..60%: inconclusive; c
    gains 20% in every pair, surer than d's 12%. Failed members first, then c, d, b."""
    a = member(0, [0.0] * 6, outcome="crash")
    b = member(1, [0.01, 0.6, 0.6, 0.6, 0.6, 0.6])
    c = member(2, [0.20, 0.21, 0.2, 0.22, 0.2, 0.2])
    d = member(3, [0.12, 0.13, 0.12, 0.125, 0.12, 0.12])
    assert K.judge_record(b["rec"], GOALS, KEEPER, KEEPER).status == "inconclusive"
    order = wave.judging_order([a, b, c, d], GOALS, KEEPER, KEEPER)
    assert [m["k"] for m in order] == [0, 2, 3, 1], [m["k"] for m in order]


def test_fairness_compares_the_gpus_by_the_same_intervals() -> None:
    same = [1.0, 1.001, 0.999, 1.0, 1.002, 1.0]
    assert K.agreement([("0", same), ("1", [t * 1.002 for t in same])], 0.01) == "within"
    assert K.agreement([("0", same), ("1", [t * 1.05 for t in same])], 0.01) == "OUTSIDE"
    noisy = [1.0, 1.1, 0.9, 1.0, 1.02, 1.0]
    assert K.agreement([("0", noisy), ("1", [t * 1.03 for t in noisy])], 0.01) == "cannot tell"
    line, = wave.fairness([("a.py (ab12)", "0", same), ("a.py (ab12)", "1", [t * 1.05 for t in same])], 0.01)
    assert line.startswith("fairness: a.py (ab12): gpu 0 1 s (97% CI 0.999..1.002), gpu 1 1.05 s") and \
        line.endswith("OUTSIDE the 1% noise threshold: these GPUs do not measure alike"), line
