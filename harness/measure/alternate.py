"""The keeper and the candidate timed in alternation, each in a worker of its own (harness/measure/session.py).

    keeper_facts, candidate_facts = measure_pair(keeper_session, candidate_session, pairs)

Both workers are built (one at a time), then the timed calls alternate in pairs whose order (keeper
first or candidate first) is drawn from os.urandom, half of them each way (balanced), so the machine's drift falls on both alike
(harness/decide/keep_rule.py reads the pairs). Only the worker being timed runs: the other one, and
everything it started, is frozen by the kernel (its cgroup's freezer, harness/sandbox/cgroup.py; where
the machine has none, stopped by signals, and the row says so) for the whole call, so it cannot
take the CPU or the GPU's queue from its rival. A worker the kernel cannot freeze is stopped and
fails. What freezing cannot hide: a frozen worker's clock jumps by the rival's call when it wakes,
so it can learn its rival's call durations (the row's sandbox label says so). Work a worker queued on the GPU before saying "done" could still run
into the rival's call: before each call the harness waits until NVML reads the GPU idle, and a
worker that leaves it busy fails (harness/measure/busy.py wait_idle). The harness waits so before
every timed call, a member's second call in a row too: a GPU at its power cap runs a call faster
after an idle moment (busy.py, "Why every call waits"), so every call starts from the same state,
its GPUs idle. Both workers are frozen during that wait: a busy GPU then shows work the last call
left, never work the next member started to have its rival blamed. Every call is the same call as
in a measurement alone: a fresh input, checked. (Unsandboxed, a person's choice, a process the worker
double-forked is adopted by the harness and is not stopped with it; in the sandbox it stays in the
worker's PID namespace, below the worker.)
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.measure import busy

from harness.cli.phases import phase
from harness.measure.session import Session
from harness.errors import Refused

_rng = random.SystemRandom()


class CandidateDidNotStart(Refused):
    """The candidate's worker did not start while the keeper's did: its module (imported as the
    worker starts, harness/worker/main.py) hung or killed it. The candidate's failure, not the setup's."""


@contextlib.contextmanager
def started(keeper: Path, candidate: Path, preset: str, device: str, **options: Any) -> Iterator[tuple[Session, Session]]:
    """Two sessions on the same inputs, their workers started at once (the candidate's awaited
    first: its import fails fast); both closed after."""
    k = Session(keeper, preset, device, **options)
    c = Session(candidate, preset, device, assets_from=k, **options)
    try:
        phase(f"starting the workers: the keeper ({keeper.name}) and the candidate ({candidate.name})")
        k.spawn()
        c.spawn()
        try:
            c.await_ready()
        except Refused as e:
            k.await_ready()  # a keeper that cannot start either: the setup's failure, as it was
            raise CandidateDidNotStart(str(e)) from None
        k.await_ready()
        yield k, c
    finally:
        c.__exit__(None, None, None)
        k.__exit__(None, None, None)


def measure_pair(keeper: Session, candidate: Session, pairs: int, want_frame: bool = False,
                 keeper_in_full: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Measure both with `pairs` timed calls each, alternating. The candidate's facts get "paired":
    the keeper's timed calls beside its own. A keeper that fails leaves the candidate measured alone
    (its facts say why in "paired_error": the keep rule then finds it inconclusive). A candidate
    that fails ends the pairs, unless the
    keeper's own figures are wanted (keeper_in_full: a first run's baseline, recorded as a row):
    its calls then go on alone, its rival's worker already gone (Measuring.fail)."""
    both = (keeper, candidate)
    facts: dict[Session, dict[str, Any]] = {}
    for s in (candidate, keeper):  # built one at a time, the other one frozen; the candidate first:
        _only(s, both, facts)  # one that fails to import or build is answered before the keeper's build
        phase(f"building and warming up the {'candidate' if s is candidate else 'keeper'}")
        facts[s] = s.begin(want_frame=want_frame and s is candidate, runs=pairs)
        if facts[candidate]["status"] != "measured" and not keeper_in_full:
            candidate.resume()
            return {"passed": False, "reason": "not measured: the candidate failed first"}, candidate.finish(facts[candidate])
    last: Session = keeper  # begun last: its warm-up's work must not run into the candidate's first call
    for n, keeper_first in enumerate(balanced(pairs), 1):
        phase(f"measured pair {n}/{pairs}")
        order = both if keeper_first else both[::-1]
        for s in order:
            if facts[s]["status"] != "measured":
                continue
            # Before every timed call, after its rival's or its own: the same idle wait (busy.py, why),
            # with both workers frozen, so that what keeps a GPU busy is what the last call left running,
            # never work the member about to be timed starts to have its rival blamed.
            _only(None, both, facts)
            if not busy.wait_idle(s.device, s.timeouts["call_s"], last.ranks) and facts[last]["status"] == "measured":
                last.fail(facts[last], "gate_fail", busy.left_running(s.timeouts["call_s"]))
                if last is candidate and not keeper_in_full:
                    break
                busy.wait_idle(s.device, s.timeouts["call_s"], last.ranks)  # its worker is gone now: let its work end
            # Pause the rival again, not only wake s: under the signals fallback (no cgroup freezer) that is a
            # second sweep of its process tree, for a child that slipped past the first (session 31's reader).
            _only(s, both, facts)
            s.timed_call(facts[s])
            last = s
        if facts[candidate]["status"] != "measured" and not keeper_in_full:
            break
    for s in both:
        s.resume()
    kf, cf = keeper.finish(facts[keeper]), candidate.finish(facts[candidate])
    if kf["passed"] and cf["passed"]:
        cf["paired"] = {"keeper_sha": kf["candidate_sha"][:16], "keeper_times_s": kf["times_s"],
                        "keeper_warmup_s": kf["warmup_s"], "keeper_median_s": kf["median_s"],
                        # a first run's baseline, measured here in full: its row is this measurement, so
                        # it has no earlier figure to drift from (harness/decide/keep_rule.py)
                        "baseline_now": keeper_in_full}
    elif cf["passed"]:
        cf["paired_error"] = f"the keeper failed beside it: {kf['reason']}"
    return kf, cf


def balanced(pairs: int, rng: random.Random = _rng) -> list[bool]:
    """Which pairs time the keeper first: half of them (one more either way for an odd count), in
    an order drawn from os.urandom. A machine that drifts steadily slows the second call of every
    pair a little: with the halves balanced it moves half the pairs one way and half the other, so
    it cannot line all six up as a gain or a loss (harness/decide/keep_rule.py), as one run in 32 of
    independent coin flips would."""
    firsts = [True, False] * (pairs // 2) + ([bool(rng.getrandbits(1))] if pairs % 2 else [])
    rng.shuffle(firsts)
    return firsts


def _only(s: Session | None, both: tuple[Session, ...], facts: dict[Session, dict[str, Any]]) -> None:
    """Freeze the others, wake s (s None: freeze them all). One the kernel cannot freeze has been
    stopped: it fails."""
    for other in both:
        if other is not s:
            why = other.pause()
            if why is not None and other in facts and facts[other]["status"] == "measured":
                other.fail(facts[other], "crash", why)
    if s is not None:
        s.resume()
