"""harness/replies.py on what a forged worker may send: each malformed shape is Malformed (a crash row),
never a figure the harness keeps. Here the launching threads' figures (`host`, harness/worker/calls.py);
the other replies' cheaters run through the harness in test_cheaters_isolation.py."""

from __future__ import annotations

import math

import pytest

from harness import replies


def test_host_figures_one_pair_a_rank() -> None:
    assert replies.host({}, 2) is None  # no claim: nothing kept
    assert replies.host({"host": [[0.5, 0.25], [1, 0]]}, 2) == [[0.5, 0.25], [1.0, 0.0]]


@pytest.mark.parametrize("forged", [
    "0.5",                          # not a list
    [[0.5, 0.25]],                  # one rank's of a group of two
    [[0.5, 0.25], [0.5, 0.25], [0.5, 0.25]],
    [[0.5, 0.25], [0.5]],           # not a pair
    [[0.5, 0.25], {"returned_s": 0.5}],
    [[0.5, 0.25], [math.nan, 0.1]],
    [[0.5, 0.25], [0.5, -1.0]],
    [[0.5, 0.25], [True, 0.1]],     # a bool is not a number here
    [[0.5, 0.25], [10 ** 400, 0.1]],
    [[0.5, 0.25], ["0.5", 0.1]],
    [None, [0.5, 0.25]],            # what worker_group.merged puts for a rank that sent no list
])
def test_forged_host_figures_are_malformed(forged: object) -> None:
    with pytest.raises(replies.Malformed):
        replies.host({"host": forged}, 2)
