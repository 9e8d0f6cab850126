"""Cheater: patches the worker from inside (the Worker class, found through gc) so that the
replies the harness trusts raw are malformed; CHEAT_MALFORMED picks which:
  memory_str   the 'memory' reply's peak_mem_gb is a string;
  memory_blob  ... is a 7.5 MB string (under the channel's 8 MB line limit);
  profile      the 'profile' reply's summary has the wrong types (a string for the categories,
               a number for the top kernels);
  flops        the 'flops' reply's count is a string.
The calls themselves are answered honestly and fast (it sets the toy model's delay to 0, so that
against a slow baseline it is a keeper, which is profiled and FLOP-counted). A harness that uses a
reply unchecked dies in a traceback with no row written, or records nonsense.

Stopped by: every reply validated against a schema (types, sizes) before use; one that fails it
makes the run a crash with a one-line reason. The test runs run_experiment.py and checks that a
crash row is written and no traceback is printed."""

import os

from _reach import worker
from _target import honest


def patch(kind: str) -> str:
    w = worker()
    if w is None:
        return "no Worker object found"
    cls = type(w)
    if kind == "memory_str":
        cls.memory = lambda self: {"peak_mem_gb": "plenty"}
    elif kind == "memory_blob":
        cls.memory = lambda self: {"peak_mem_gb": "9" * 7_500_000}
    elif kind == "profile":
        real = cls.profile
        cls.profile = lambda self: {**real(self), "profile": {"unit": 7, "by_category_s": "conv", "top": 12,
                                                               "kernel_time_s": "fast", "busy_s": None}}
    elif kind == "flops":
        real = cls.flops
        cls.flops = lambda self: {**real(self), "flops": "a great many"}
    else:
        return f"unknown kind {kind}"
    return f"Worker.{kind.split('_')[0]} patched"


def build_decoder(model, example):
    if hasattr(model, "delay"):
        model.delay = 0.02  # the toy: 5x faster than the baseline, its calls sleep-dominated (stable under load)
    note = patch(os.environ.get("CHEAT_MALFORMED", "memory_str"))
    return (lambda x: honest(model, x)), {"cheat": "malformed replies", "note": note}
