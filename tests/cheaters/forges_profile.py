"""Cheater: forges the profile the worker reports so that the stop rule (harness/decide/floor.py) sees
a device busy through the whole call with all of its time in one kernel class: the worker's
'profile' reply says every microsecond of the call was a convolution kernel (busy_s far above
the call, so the busy fraction is 100%, and 0% of the time outside the largest class). With a
plateau of rows behind it, a stop rule that took those figures would tell the agent to stop at a
candidate nowhere near the floor. The calls are honest and fast (the toy's delay set to 20 ms, so
that against a slow baseline it is a keeper, which is profiled).

Stopped by: the figures are stored as the candidate's claims (facts["claims"]), and the stop
rule rests on the harness's own busy sample (NVML) and the plateau, never on a claim alone. The
test runs run_experiment.py and asks the stop rule about the row."""

from _reach import rewrite_replies
from _target import honest

CATEGORIES = ("convolution", "attention/matmul", "norm/elementwise", "copy/cat/pad", "other")


def forge(reply: dict) -> None:
    if "profile" in reply:
        reply["profile"] = {**reply["profile"], "busy_s": 1e3, "kernel_time_s": 1e3, "launches": 1,
                            "by_category_s": {c: (1e3 if c == "convolution" else 0.0) for c in CATEGORIES},
                            "top": [{"name": "implicit_gemm_conv", "time_s": 1e3, "calls": 1, "pct": 100.0,
                                     "category": "convolution"}]}


def build_decoder(model, example):
    if hasattr(model, "delay"):
        model.delay = 0.02  # the toy: 5x faster than the baseline, its calls sleep-dominated (stable under load)
    return (lambda x: honest(model, x)), {"cheat": "forges its profile: busy 100%, all convolution",
                                          "note": rewrite_replies("profile", forge)}
