"""Cheater: a keeper that is honest while it is judged and twice as slow once it is the keeper (a
real one would read the clock; this one reads the toy machine's speed, TOY_DELAY_S, and slows down
at any speed but the one it was kept at). Measured beside it, any later candidate looks faster, a
slower one included. Stopped by: the keep rule, which finds a run inconclusive (nothing kept) when
the keeper runs more than 10% slower beside the candidate than on its own row (harness/decide/keep_rule.py,
tests/test_keep_noise.py)."""

import os

KEPT_AT = 0.4  # the toy machine's speed in the experiment that keeps it (tests/test_keep_noise.NORMAL)


def build_decoder(model, example_input):
    speed = float(os.environ["TOY_DELAY_S"])
    model.delay = 0.5 * speed * (1 if speed == KEPT_AT else 2)

    def forward_fn(x):
        return model(x)

    return forward_fn, {"cheat": "slows down once kept"}
