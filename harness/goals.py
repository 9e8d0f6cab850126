"""goals.json as a typed, read-only object: read once per process (again only if the file changes).

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

# Tests and retargeted copies point the harness at another goals file with this variable.
GOALS_ENV = "AUTO_OPTIM_GOALS"
REPO = Path(__file__).resolve().parent.parent


class GoalsError(Exception):
    """The goals file is missing or not what the harness reads (_common turns it into a SetupError)."""


@dataclass(frozen=True)
class Preset:
    name: str
    input_shape: tuple[int, ...]
    timed_runs: int
    warmup_runs: int
    work_per_call: float
    ranks: int                      # processes of one worker group (one a GPU); above 1: a split run
    memory_gb: float | None         # GPU memory a candidate must fit in, each GPU (harness/memory_limit.py)
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
    noise: float                    # noise_threshold: the keep rule's bar (harness/keep_rule.py)
    warmup_gain: float | None
    quality_name: str
    quality_better: str
    presets: Mapping[str, Preset]
    worker_env: tuple[str, ...]
    frozen: tuple[str, ...]         # files outside the adapter's package that it runs (from the goals file's folder)
    raw: Mapping[str, Any] = field(repr=False)
    worker_memory_gb: float | None = None  # host memory each worker's cgroup may hold (harness/cgroup.py); None: its default

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
    return Path(os.environ.get(GOALS_ENV, REPO / "goals.json")).resolve()


def parse(data: Any, where: Path) -> Goals:
    """A Goals from goals.json's dict (tests pass partial ones: what is absent takes its default)."""
    if isinstance(data, Goals):
        return data
    if not isinstance(data, dict):
        raise GoalsError(f"goals file {where} is not a JSON object")
    metric = data.get("metric") if isinstance(data.get("metric"), dict) else {}
    gate = data.get("gate") if isinstance(data.get("gate"), dict) else {}
    presets = {}
    for name, p in (data.get("presets") or {}).items():
        presets[name] = Preset(name, tuple(p.get("input_shape", ())), int(p.get("timed_runs", 5)),
                               int(p.get("warmup_runs", 1)), float(p.get("work_per_call", 1)),
                               _ranks(p, name, where), _memory_gb(p, name, where), MappingProxyType(p))
    better = metric.get("better", "lower")
    if better not in ("lower", "higher"):
        raise GoalsError(f"goals file {where}: metric.better is {better!r}, not 'lower' or 'higher'")
    gain = data.get("warmup_gain")
    return Goals(where, str(data.get("adapter", "")), str(data.get("candidate", "optimize.py")),
                 str(data.get("build_fn", "build_decoder")), metric.get("name", "median_s"), metric.get("unit", "s"),
                 better, float(data.get("noise_threshold", 0.01)), float(gain) if gain else None,
                 gate.get("quality_name", "quality"), gate.get("quality_better", "higher"),
                 MappingProxyType(presets), tuple(data.get("worker_env", ())), _frozen(data, where),
                 MappingProxyType(data), worker_memory_gb=_worker_memory_gb(data, where))


def _frozen(data: Mapping[str, Any], where: Path) -> tuple[str, ...]:
    """"frozen": the paths (files or folders, from the goals file's folder) of code outside the
    adapter's package that the adapter runs, such as a split decode: hashed into every row with
    the rest of the frozen files, so a row says which of that code measured it."""
    paths = data.get("frozen", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p and not Path(p).is_absolute() for p in paths):
        raise GoalsError(f"goals file {where}: frozen is {paths!r}, not a list of paths from the goals file's folder")
    candidate = os.path.normpath(str(data.get("candidate", "optimize.py")))
    for p in paths:  # git and the hooks take them from the target's folder; the candidate is what changes
        if os.path.normpath(p) in (".", candidate) or ".." in Path(p).parts:
            raise GoalsError(f"goals file {where}: frozen names {p!r}: name code inside the target's folder, "
                             "not the folder itself, a path out of it, or the candidate")
    return tuple(paths)


def _ranks(preset: Mapping[str, Any], name: str, where: Path) -> int:
    """A preset's "ranks": a whole number >= 1 (1 when absent)."""
    ranks = preset.get("ranks", 1)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise GoalsError(f"goals file {where}: preset {name}'s ranks is {ranks!r}, not a whole number >= 1")
    return ranks


def _memory_gb(preset: Mapping[str, Any], name: str, where: Path) -> float | None:
    """A preset's "memory_gb": a positive number of GB, or None (absent: no memory clause)."""
    gb = preset.get("memory_gb")
    if gb is None:
        return None
    if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not 0 < gb < math.inf:
        raise GoalsError(f"goals file {where}: preset {name}'s memory_gb is {gb!r}, not a positive number of GB")
    return float(gb)


def _worker_memory_gb(data: Mapping[str, Any], where: Path) -> float | None:
    """"worker_memory_gb": the host memory (GB, 10^9 bytes) a worker and everything it starts may
    hold together, its memfds and /tmp included (harness/cgroup.py; absent: 40% of this machine's)."""
    gb = data.get("worker_memory_gb")
    if gb is None:
        return None
    if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not 0 < gb < math.inf:
        raise GoalsError(f"goals file {where}: worker_memory_gb is {gb!r}, not a positive number of GB")
    return float(gb)


_cache: dict[Path, tuple[tuple[int, int], Goals]] = {}


def load() -> Goals:
    """The goals file named by AUTO_OPTIM_GOALS (else the repository's goals.json), read once."""
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
    goals = parse(data, where)
    _cache[where] = (stamp, goals)
    return goals


def as_goals(goals: Goals | Mapping[str, Any] | None) -> Goals:
    """A Goals from what a caller holds (a test's partial dict, or None: every default)."""
    return goals if isinstance(goals, Goals) else parse(dict(goals or {}), Path("<goals given in code>"))
