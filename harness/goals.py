"""goals.json as a typed, read-only object: read once per process (again only if the file changes),
and checked then, key by key (check): a wrong type or range, or a missing adapter, presets, gate or
stop_rule, is one line naming the key (every tool exits 2 with it), never a traceback later.

    goals = load()                  # harness/_common.py load_goals() returns the same object
    goals.better, goals.noise, goals.quality_name, goals.presets["tiny"].timed_runs

The fields are what the harness decides with; the file's other keys (pool, stop_rule, floor, ...)
are read as goals["key"] / goals.get("key"), as from the dict they come from.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from harness import paths
from harness.paths import GOALS_ENV  # noqa: F401 - the tests' override of the goals file (harness/paths.py)


class GoalsError(Exception):
    """The goals file is missing or not what the harness reads (_common raises it as Refused)."""


@dataclass(frozen=True)
class Preset:
    name: str
    input_shape: tuple[int, ...]
    timed_runs: int
    warmup_runs: int
    work_per_call: float
    ranks: int                      # processes of one worker group (one a GPU); above 1: a split run
    memory_gb: float | None         # GPU memory a candidate must fit in, each GPU (harness/measure/memory_limit.py)
    raw: Mapping[str, Any] = field(repr=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]


@dataclass(frozen=True)
class Goals:
    path: Path
    adapter: str
    candidate: str
    build_fn: str
    metric: str                     # what is compared: median_s, or a throughput's name
    unit: str
    better: str                     # "lower" (a latency) or "higher" (a throughput)
    noise: float                    # noise_threshold: the keep rule's bar (harness/decide/keep_rule.py)
    warmup_gain: float | None
    quality_name: str
    quality_better: str
    presets: Mapping[str, Preset]
    worker_env: tuple[str, ...]
    frozen: tuple[str, ...]         # files outside the adapter's package that it runs (from the goals file's folder)
    raw: Mapping[str, Any] = field(repr=False)
    worker_memory_gb: float | None = None  # host memory each worker's cgroup may hold (harness/sandbox/cgroup.py); None: its default

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.raw

    @property
    def gate(self) -> Mapping[str, Any]:
        return self.raw["gate"]

    @property
    def metric_spec(self) -> dict[str, Any]:
        return {**(self.raw.get("metric") if isinstance(self.raw.get("metric"), dict) else {}),
                "name": self.metric, "unit": self.unit, "better": self.better}


def path() -> Path:
    """The goals file the harness reads: harness/paths.py goals_path()."""
    try:
        return paths.goals_path()
    except paths.TargetError as e:
        raise GoalsError(str(e)) from None


def parse(data: Any, where: Path, complete: bool = False) -> Goals:
    """A Goals from goals.json's dict, every key the harness reads checked for its type and range
    (check). complete: a goals file, which must name what every run needs (adapter, presets, gate,
    stop_rule); tests pass partial dicts in code, where what is absent takes its default."""
    if isinstance(data, Goals):
        return data
    check(data, where, complete)
    metric = data.get("metric") or {}
    gate = data.get("gate") or {}
    presets = {}
    for name, p in (data.get("presets") or {}).items():
        presets[name] = Preset(name, tuple(p.get("input_shape", ())), int(p.get("timed_runs", min_timed_runs())),
                               int(p.get("warmup_runs", 1)), float(p.get("work_per_call", 1)), int(p.get("ranks", 1)),
                               float(p["memory_gb"]) if p.get("memory_gb") is not None else None, MappingProxyType(p))
    gain = data.get("warmup_gain")
    # The defaults are in the mapping too: the harness reads goals["candidate"] and goals["build_fn"].
    raw = {"candidate": "optimize.py", "build_fn": "build_decoder", **data}
    return Goals(where, str(data.get("adapter", "")), raw["candidate"], raw["build_fn"], metric.get("name", "median_s"),
                 metric.get("unit", "s"), metric.get("better", "lower"), float(data.get("noise_threshold", 0.01)),
                 float(gain) if gain else None, gate.get("quality_name", "quality"), gate.get("quality_better", "higher"),
                 MappingProxyType(presets), tuple(data.get("worker_env", ())), tuple(data.get("frozen", ())),
                 MappingProxyType(raw), worker_memory_gb=_worker_memory_gb(data, where))


# --- the check: one line naming the key, its rule and the value found ----------------------------

# The keep rule's fewest pairs (harness/decide/keep_rule.py): the fewest whose widest interval reaches its
# CONFIDENCE (1 - 2/2^6 = 96.9%). Here, the bound a preset's timed_runs is checked against, since the
# keep rule reads this module (no import circle).
MIN_PAIRS = 6


def min_timed_runs() -> int:
    """The fewest timed runs a preset may ask for: the keep rule's pairs (MIN_PAIRS)."""
    return MIN_PAIRS


def _shown(where: Path) -> str:
    """The goals file as a person would name it: from the working folder when it is below it."""
    try:
        return str(where.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(where)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _text(x: Any) -> bool:
    return isinstance(x, str)


def _name(x: Any) -> bool:
    return isinstance(x, str) and x.isidentifier()


def _module(x: Any) -> bool:
    return isinstance(x, str) and bool(x) and all(part.isidentifier() for part in x.split("."))


def _relative_py(x: Any) -> bool:
    return isinstance(x, str) and x.endswith(".py") and not Path(x).is_absolute() and ".." not in Path(x).parts


def _one_of(*values: str):
    return lambda x: x in values


def _at_least(low: float, whole: bool = False):
    return lambda x: (_whole(x) if whole else _number(x)) and x >= low


def _positive(x: Any) -> bool:
    return _number(x) and x > 0


def _fraction(x: Any) -> bool:  # [0, 1)
    return _number(x) and 0 <= x < 1


def _share(x: Any) -> bool:  # [0, 1]
    return _number(x) and 0 <= x <= 1


def _texts(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) and v for v in x)


def _shape(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(_whole(v) and v >= 1 for v in x)


# (rule, what the rule asks for): the keys every goals file may hold, and their parts.
TOP: dict[str, tuple[Any, str]] = {
    "target": (_text, "a string"), "description": (_text, "a string"),
    "adapter": (_module, "a module name (package.module) next to the goals file"),
    "candidate": (_relative_py, "a .py file in the target's folder"),
    "build_fn": (_name, "a Python function name"),
    "input_source": (_one_of("clip", "seeded"), "'clip' or 'seeded'"),
    "metric": (lambda x: isinstance(x, dict), "an object (name, unit, better)"),
    "presets": (lambda x: isinstance(x, dict) and bool(x), "an object of presets, at least one"),
    "pool": (lambda x: isinstance(x, dict), "an object (size, strict, store_dtype)"),
    "timeouts": (lambda x: isinstance(x, dict), "an object (start_s, build_s, call_s)"),
    "gate": (lambda x: isinstance(x, dict), "an object: the bounds the adapter's compare reads, quality_name, quality_better"),
    "noise_threshold": (_fraction, "a number in [0, 1)"),
    "warmup_gain": (lambda x: x is None or _fraction(x), "a number in [0, 1), or null"),
    "stop_rule": (lambda x: isinstance(x, dict), "an object (plateau_attempts, gpu_busy_min, max_outside, within_floor)"),
    "floor": (lambda x: isinstance(x, dict), "an object (work: 'flops' or 'bytes')"),
    "worker_env": (_texts, "a list of environment variable names"),
    "worker_memory_gb": (_positive, "a positive number of GB"),
    "worker_tasks": (_at_least(64, whole=True), "a whole number >= 64 (processes and threads of a worker, harness/sandbox/cgroup.py)"),
}
PARTS: dict[str, dict[str, tuple[Any, str]]] = {
    "metric": {"name": (_name, "a name (median_s, tokens_per_s, ...)"), "unit": (_text, "a string"),
               "better": (_one_of("lower", "higher"), "'lower' or 'higher'"), "text": (_text, "a string")},
    "pool": {"size": (_at_least(1, whole=True), "a whole number >= 1"),
             "strict": (_at_least(0, whole=True), "a whole number >= 0"),
             "store_dtype": (_one_of("float32", "float16", "bfloat16"), "'float32', 'float16' or 'bfloat16'"),
             "reference": (_text, "a string"), "rationale": (_text, "a string")},
    "timeouts": {k: (_positive, "a number of seconds above 0") for k in ("start_s", "build_s", "call_s")},
    "gate": {"quality_name": (_text, "a string"), "quality_better": (_one_of("lower", "higher"), "'lower' or 'higher'"),
             "rationale": (_text, "a string"),
             "value_range": (lambda x: isinstance(x, list) and len(x) == 2 and all(map(_number, x)) and x[0] < x[1],
                             "[low, high], two numbers, low < high")},
    "stop_rule": {"plateau_attempts": (_at_least(1, whole=True), "a whole number >= 1"),
                  "gpu_busy_min": (_share, "a number in [0, 1]"), "max_outside": (_share, "a number in [0, 1]"),
                  "within_floor": (_at_least(0), "a number >= 0"), "text": (_text, "a string")},
    "floor": {"work": (_one_of("flops", "bytes"), "'flops' or 'bytes'"), "note": (_text, "a string")},
}
PRESET: dict[str, tuple[Any, str]] = {
    "input_shape": (_shape, "a list of whole numbers >= 1"),
    "warmup_runs": (_at_least(1, whole=True), "a whole number >= 1"),
    "work_per_call": (_positive, "a number above 0"),
    "ranks": (_at_least(1, whole=True), "a whole number >= 1"),
    "memory_gb": (lambda x: x is None or _positive(x), "a positive number of GB"),
    "note": (_text, "a string"),
}
REQUIRED = ("adapter", "presets", "gate", "stop_rule")  # what every run reads (complete=True)


def check(data: Any, where: Path, complete: bool = False) -> None:
    """Every key the harness reads, its type and range: GoalsError, one line naming the key, at
    the first that is wrong. Keys it does not read (rationales, notes) are the file's own."""
    shown = _shown(where)

    def bad(key: str, what: str, value: Any = ...) -> GoalsError:
        return GoalsError(f"{shown}: {key} " + (f"is missing: it must be {what}" if value is ... else
                                                f"must be {what}, not {value!r}"))

    if not isinstance(data, dict):
        raise GoalsError(f"{shown}: must hold a JSON object, not {type(data).__name__}")
    for key in REQUIRED if complete else ():
        if key not in data:
            raise bad(key, TOP[key][1])
    for key, (ok, what) in TOP.items():
        if key in data and not ok(data[key]):
            raise bad(key, what, data[key])
    for key, parts in PARTS.items():
        for part, (ok, what) in parts.items():
            if part in (data.get(key) or {}) and not ok(data[key][part]):
                raise bad(f"{key}.{part}", what, data[key][part])
    pool = data.get("pool") or {}
    if _whole(pool.get("strict")) and _whole(pool.get("size")) and pool["strict"] > pool["size"]:
        raise bad("pool.strict", f"at most pool.size ({pool['size']})", pool["strict"])
    for part, value in (data.get("gate") or {}).items():  # the adapter's bounds: numbers
        if part.startswith(("min_", "max_")) and not _number(value):
            raise bad(f"gate.{part}", "a number", value)
    least = min_timed_runs()
    for name, preset in (data.get("presets") or {}).items():
        if not isinstance(preset, dict):
            raise bad(f"presets.{name}", "an object (input_shape, timed_runs, warmup_runs)", preset)
        if complete and "input_shape" not in preset:
            raise bad(f"presets.{name}.input_shape", PRESET["input_shape"][1])
        for part, (ok, what) in PRESET.items():
            if part in preset and not ok(preset[part]):
                raise bad(f"presets.{name}.{part}", what, preset[part])
        runs = preset.get("timed_runs")
        if runs is not None and not (_whole(runs) and runs >= least):
            raise bad(f"presets.{name}.timed_runs", f"a whole number >= {least} (the keep rule times the candidate "
                      f"beside its keeper in at least {least} pairs: fewer cannot reach its confidence)", runs)
    _frozen(data, shown)


def _frozen(data: Mapping[str, Any], shown: str) -> None:
    """"frozen": the paths (files or folders, from the goals file's folder) of code outside the
    adapter's package that the adapter runs, such as a split decode: hashed into every row with
    the rest of the frozen files, so a row says which of that code measured it."""
    paths = data.get("frozen", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p and not Path(p).is_absolute() for p in paths):
        raise GoalsError(f"{shown}: frozen must be a list of paths from the goals file's folder, not {paths!r}")
    candidate = os.path.normpath(str(data.get("candidate", "optimize.py")))
    for p in paths:  # git and the hooks take them from the target's folder; the candidate is what changes
        if os.path.normpath(p) in (".", candidate) or ".." in Path(p).parts:
            raise GoalsError(f"{shown}: frozen names {p!r}: name code inside the target's folder, "
                             "not the folder itself, a path out of it, or the candidate")


def _worker_memory_gb(data: Mapping[str, Any], where: Path) -> float | None:
    """"worker_memory_gb": the host memory (GB, 10^9 bytes) a worker and everything it starts may
    hold together, its memfds and /tmp included (harness/sandbox/cgroup.py; absent: 40% of this machine's)."""
    gb = data.get("worker_memory_gb")
    if gb is None:
        return None
    if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not 0 < gb < math.inf:
        raise GoalsError(f"goals file {where}: worker_memory_gb is {gb!r}, not a positive number of GB")
    return float(gb)


_cache: dict[Path, tuple[tuple[int, int], Goals]] = {}


def load() -> Goals:
    """The goals file named by AUTO_OPTIM_GOALS (else the default target's), read once."""
    where = path()
    try:
        st = where.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        hit = _cache.get(where)
        if hit and hit[0] == stamp:
            return hit[1]
        data = json.loads(where.read_text())
    except FileNotFoundError:
        raise GoalsError(f"goals file not found: {where}") from None
    except json.JSONDecodeError as e:
        raise GoalsError(f"goals file {where} is not valid JSON: {e}") from None
    goals = parse(data, where, complete=True)
    _cache[where] = (stamp, goals)
    return goals


def as_goals(goals: Goals | Mapping[str, Any] | None) -> Goals:
    """A Goals from what a caller holds (a test's partial dict, or None: every default)."""
    return goals if isinstance(goals, Goals) else parse(dict(goals or {}), Path("<goals given in code>"))
