"""What the worker says, checked before the harness uses it.

After the candidate is imported, the worker is the candidate: every reply may be forged. So each
reply is checked against what its request can answer (types, ranges, sizes) and turned into plain
data; anything else is `Malformed`, which the session records as a crash. The worker's words
(its info, error messages, kernel names, its last printed line) are text a person or the agent will
read: `one_line` and `markdown` make them inert there (no newlines that would forge a `key: value`
line, no terminal escapes, no markdown structure) and short.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# The profile's categories of kernel time (harness/measure/profile.py classifies into them).
CATEGORIES = ("convolution", "attention/matmul", "norm/elementwise", "copy/cat/pad", "other")

TEXT_LIMIT = 300          # characters of any one worker string that are kept
INFO_ENTRIES = 32         # keys of a candidate's `info` (and items of any list or dict in it)
INFO_BYTES = 8192         # its size as JSON: it describes a configuration, it carries no data
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]+")
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|#~])")
TOP_ROWS = 15             # rows of a profile's kernel list (harness/measure/profile.py summarize makes at most these)
NAME_LIMIT = 80           # characters of a row's name
_NAME_OUT = re.compile(r"[^A-Za-z0-9_:<>,.()\[\]*&+\- ]")


class Malformed(Exception):
    """A reply that its request cannot have produced honestly: the message says what is wrong."""


def one_line(value: Any, limit: int = TEXT_LIMIT) -> str:
    """Any worker-provided value as one printable line of at most `limit` characters."""
    text = _CONTROL.sub(" ", str(value)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def markdown(value: Any, limit: int = TEXT_LIMIT) -> str:
    """one_line, with markdown's special characters escaped (a table cell, a list item)."""
    return _MARKDOWN.sub(r"\\\1", one_line(value, limit))


def kernel_name(value: Any) -> str:
    """A profile row's name as the worker claims it, cut to what a kernel's or an op's name is
    made of (letters, digits, `_:<>,.()[]*&+-` and spaces) and to NAME_LIMIT characters: a row
    carries no arbitrary bytes into the markdown the agent reads."""
    text = _NAME_OUT.sub("", str(value))
    return text if len(text) <= NAME_LIMIT else text[: NAME_LIMIT - 3] + "..."


def _number(msg: dict[str, Any], key: str, *, optional: bool = False, integer: bool = False) -> float | None:
    value = msg.get(key)
    if value is None and optional:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2 ** 53:
        raise Malformed(f"'{key}' is an integer of {len(str(value))} digits")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise Malformed(f"'{key}' is {one_line(repr(value), 60)}, not a finite number >= 0")
    if integer and value != int(value):
        raise Malformed(f"'{key}' is {value}, not a whole number")
    return int(value) if integer else float(value)


def _text(msg: dict[str, Any], key: str) -> str | None:
    value = msg.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Malformed(f"'{key}' is a {type(value).__name__}, not text")
    return one_line(value)


def _inert(value: Any, depth: int = 0) -> Any:
    """A JSON value with every string made one short line; nesting past 3 levels, and numbers no
    float can hold, become text."""
    if value is None or isinstance(value, bool) or (isinstance(value, int) and abs(value) <= 2 ** 53):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, int):
        return f"an integer of {len(str(value))} digits"
    if isinstance(value, str) or depth >= 3 or not isinstance(value, (dict, list)):
        return one_line(value if isinstance(value, str) else json.dumps(value, default=str), 200)
    if isinstance(value, list):
        return [_inert(v, depth + 1) for v in value[:INFO_ENTRIES]]
    return {one_line(k, 64): _inert(v, depth + 1) for k, v in list(value.items())[:INFO_ENTRIES]}


def info(value: Any) -> dict[str, Any]:
    """The candidate's description of itself: a small dict whose strings are inert."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"info is a {type(value).__name__}, not a dict")
    if len(value) > INFO_ENTRIES:
        raise Malformed(f"info has {len(value)} entries; at most {INFO_ENTRIES}")
    clean = _inert(value)
    if len(json.dumps(clean)) > INFO_BYTES:
        raise Malformed(f"info is over {INFO_BYTES} bytes")
    return clean


def ready(msg: dict[str, Any]) -> tuple[int, float]:
    """(the Landlock ABI the worker applied, its load seconds)."""
    return int(_number(msg, "landlock_abi", integer=True)), float(_number(msg, "load_s"))


def call_error(msg: dict[str, Any]) -> str | None:
    """Why the worker could not deliver an output (shape, dtype), or None."""
    return _text(msg, "error")


def host(msg: dict[str, Any], ranks: int) -> list[list[float]] | None:
    """Each rank's [returned_s, thread_cpu_s] for one call (harness/worker/calls.py Worker.call): when its
    function returned and its launching thread's CPU seconds by then. The candidate's claim (its own
    process measured it): kept as such, never the metric. None where the reply has none."""
    value = msg.get("host")
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != ranks:
        raise Malformed(f"'host' is not a list of {ranks} [returned_s, thread_cpu_s] pairs, one a rank")
    pairs = []
    for rank, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2:
            raise Malformed(f"'host' of rank {rank} is not a [returned_s, thread_cpu_s] pair")
        pairs.append([_number({"returned_s": pair[0]}, "returned_s"), _number({"thread_cpu_s": pair[1]}, "thread_cpu_s")])
    return pairs


def peak_memory_gb(msg: dict[str, Any]) -> float | None:
    return _number(msg, "peak_mem_gb", optional=True)


def flops(msg: dict[str, Any]) -> tuple[float | None, str | None]:
    """(the FLOPs the worker counted around a call, or why it could not count them)."""
    return _number(msg, "flops", optional=True), _text(msg, "flops_error")


def profile(msg: dict[str, Any]) -> dict[str, Any]:
    """A profile summary (harness/measure/profile.py summarize()) with every field checked and its names inert."""
    s = msg.get("profile")
    if not isinstance(s, dict):
        raise Malformed(f"the profile is a {type(s).__name__}, not a summary")
    unit = s.get("unit")
    if unit not in ("GPU", "CPU"):
        raise Malformed(f"the profile's unit is {one_line(repr(unit), 40)}")
    cats = s.get("by_category_s")
    if not isinstance(cats, dict) or set(cats) != set(CATEGORIES):
        raise Malformed("the profile's categories are not the harness's")
    top = s.get("top")
    if not isinstance(top, list) or len(top) > TOP_ROWS or not all(isinstance(k, dict) for k in top):
        raise Malformed(f"the profile's kernel list is not a list of at most {TOP_ROWS} entries")
    comp = s.get("compile")
    if comp is not None and not isinstance(comp, dict):
        raise Malformed("the profile's compile figures are not a dict")
    return {
        "unit": unit, "kernel_time_s": _number(s, "kernel_time_s"), "busy_s": _number(s, "busy_s"),
        "launches": _number(s, "launches", integer=True),
        "by_category_s": {c: _number(cats, c) for c in CATEGORIES},
        "top": [{"name": kernel_name(k.get("name")), "time_s": _number(k, "time_s"),
                 "calls": _number(k, "calls", integer=True), "pct": _number(k, "pct"),
                 "category": k["category"] if k.get("category") in CATEGORIES else "other"} for k in top],
        "compile": None if comp is None else {key: _number(comp, key, integer=True)
                                              for key in ("graph_breaks", "unique_graphs")},
    }
