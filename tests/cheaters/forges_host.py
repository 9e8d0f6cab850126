"""Cheater: forges the per-rank figures the worker reports with each call (harness/worker/calls.py
Worker.call, `host`) to say its decode returned at once and cost its thread no CPU: a call that took
no time, as far as its own process tells it. An evaluator that timed calls by what the worker says
(or by the worker's clock) would record a decode of 0 s. The calls are honest (the toy's delay set
to 20 ms, so that against a slow baseline it is a keeper, which is profiled).

Stopped by: the call's time is the harness's own clock, from before the input is handed over to the
output held in the harness's memory; what the worker says of its threads is kept as its claim
(facts["claims"]["host"]) and shown as such, never the metric. The test runs run_experiment.py and
reads the row and its record."""

from _reach import rewrite_replies
from _target import honest


def forge(reply: dict) -> None:
    if "host" in reply:
        reply["host"] = [[0.0, 0.0] for _ in reply["host"]]


def build_decoder(model, example):
    if hasattr(model, "delay"):
        model.delay = 0.02  # the toy: 5x faster than the baseline, its calls sleep-dominated (stable under load)
    return (lambda x: honest(model, x)), {"cheat": "forges its host figures: every call returned at once",
                                          "note": rewrite_replies("call", forge)}
