"""The Record: one experiment's record, its fields defined once; the checks a measured record passes before it is applied and a stored one when it is read; its results.tsv row."""

from __future__ import annotations

import base64
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from harness.errors import Refused
from harness.ledger.rows import COLUMNS, RED, STATUSES, Row, cell, exp_number

HEX = re.compile(r"^[0-9a-f]{8,64}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
OUTCOMES = ("measured", *RED)


@dataclass
class Record:
    """What records/<exp>.json holds (harness/ledger/store.py writes it once, signed). The first
    group is what the measuring half writes (run_experiment --measure-only), checked field by field
    (check_measured) before apply uses it; the second what apply decides; the last what older
    records carry. A field an older record lacks has its default."""
    exp: str
    status: str
    desc: str
    preset: str
    # measured
    outcome: str | None = None  # "measured" or a failure (RED); None in records older than it
    frozen_hash: str | None = None
    timestamp: str | None = None
    device: str | None = None  # "cpu" or "cuda": the keep rule's memory clause applies on "cuda"
    facts: dict[str, Any] = field(default_factory=dict)
    candidate_sha: str | None = None
    candidate_file: str | None = None
    source_sha256: str | None = None  # the source measured: records/sources/<sha256>.py (store.py)
    rebaseline: bool | None = None
    no_profile: bool | None = None
    metric: float | None = None
    metric_spread: float | None = None
    wall_s: float | None = None
    reason: str | None = None
    would_be: str | None = None
    gpu_index: str | int | None = None  # the slot it was measured on (locks.device_slot, a wave's member)
    profile_md: str | None = None  # a keeper's is the file profile_file names
    profile: dict[str, Any] | None = None
    # decided by apply
    commit: str | None = None
    speedup_vs_fp32: float | None = None
    verdict: str | None = None
    profile_file: dict[str, Any] | None = None  # {"path": "profiles/eNNN.md", "sha256": ...}
    strip_file: dict[str, Any] | None = None    # {"path": "quality/eNNN.png", "sha256": ...}
    # older records
    legacy: dict[str, Any] = field(default_factory=dict)  # fields a record older than this type held (verify, bench)
    migrated: dict[str, Any] | None = None  # how it came into this type: from what, which cells results.tsv gave, when
    lost: str | None = None  # restore wrote it from its row when the record was gone: why

    @classmethod
    def from_json(cls, data: Any) -> "Record":
        """A stored record, every field checked (check_stored); Refused names what is wrong."""
        check_stored(data)
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        """Its fields as records/<exp>.json holds them: a field at its default (None, {}) is left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None and v != {} or k == "facts"}

    def values(self) -> dict[str, Any]:
        """The row's values (numbers as numbers): what results.tsv's row is made from, the one place."""
        f = self.facts
        out = {"exp": self.exp, "commit": self.commit, "timestamp": self.timestamp, "desc": self.desc,
               "status": self.status, "median_s": f.get("median_s"), "spread_s": f.get("spread_s"),
               "quality": f.get("quality"), "max_abs": f.get("max_abs"), "speedup_vs_fp32": self.speedup_vs_fp32,
               "gpu": f.get("gpu") or "?", "preset": self.preset, "weights": f.get("weights_kind"),
               "frozen_hash": self.frozen_hash, "candidate_sha": self.candidate_sha,
               "versions": " ".join(f"{k} {f[k]}" for k in ("torch", "cuda", "cudnn") if f.get(k)),
               "wall_s": self.wall_s, "sandbox": f.get("sandbox"),
               "metric": self.metric if self.status not in RED else None}
        # A record migrated from an older one keeps the cells that only results.tsv held, as it held them.
        return {**out, **((self.migrated or {}).get("cells") or {})}

    def row(self) -> Row:
        """Its results.tsv row, as text."""
        return Row((c, cell(v)) for c, v in self.values().items())


def record_from_row(row: dict[str, str], **why: Any) -> Record:
    """A record made from a results.tsv row alone (a row whose record was lost, or that results.tsv
    held before records existed): every figure the row has, in its field; the cells a field cannot
    say exactly as the row wrote them are kept as text (migrated["cells"]) so the row reads back unchanged.
    `why`: lost= or migrated= (a dict: what this record was made from)."""
    r = Row.of(row)
    versions = (row.get("versions") or "-").split()
    facts = {k: v for k, v in {"median_s": r.median_s, "spread_s": r.spread_s, "quality": r.quality,
                                "max_abs": r.number("max_abs"), "gpu": _text(row.get("gpu")),
                                "weights_kind": _text(row.get("weights")), "sandbox": _text(row.get("sandbox")),
                                **dict(zip(versions[::2], versions[1::2]))}.items() if v is not None}
    rec = Record(exp=row["exp"], status=row["status"], desc=_text(row.get("desc")) or "-", preset=row["preset"],
                 frozen_hash=_text(row.get("frozen_hash")), timestamp=_text(row.get("timestamp")), facts=facts,
                 candidate_sha=_text(row.get("candidate_sha")), commit=_text(row.get("commit")),
                 speedup_vs_fp32=r.speedup_vs_fp32, wall_s=r.number("wall_s"), metric=r.number("metric"),
                 **{k: v for k, v in why.items() if k == "lost"})
    migrated = dict(why.get("migrated") or {})
    made = rec.row()
    keep = {c: row.get(c, "-") for c in COLUMNS if made[c] != row.get(c, "-")}
    if keep or "migrated" in why:
        rec.migrated = {**migrated, **({"cells": keep} if keep else {})}
    return rec


def _text(v: str | None) -> str | None:
    return None if v in (None, "", "-") else v


def _line(v: Any) -> bool:
    """One line of text: a results.tsv cell or a log line (no tab, newline or other control)."""
    return isinstance(v, str) and not any(ord(c) < 32 or ord(c) == 127 for c in v)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _seconds_list(v: Any) -> bool:
    """Timed calls' seconds: what the keep rule reads from a record (facts.times_s, facts.paired)."""
    return isinstance(v, list) and 0 < len(v) <= 1000 and all(_number(t) and t > 0 for t in v)


def _optional(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _base64(v: Any) -> bool:
    try:
        base64.b64decode(v, validate=True)
        return True
    except (TypeError, ValueError):
        return False


def _file(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == {"path", "sha256"} and _line(v["path"]) and bool(SHA256.match(str(v["sha256"])))


# Every field apply reads from a measured record, and what it must be. No field is ever used as a path.
MEASURED_FIELDS: dict[str, Any] = {
    "desc": lambda v: _line(v) and v.strip() != "",
    "preset": _line,  # and a preset of goals.json: check_measured
    "device": _optional(lambda v: v in ("cpu", "cuda")),
    "outcome": lambda v: v in OUTCOMES,
    "frozen_hash": lambda v: isinstance(v, str) and bool(HEX.match(v)),
    "timestamp": _line,
    "facts": lambda v: isinstance(v, dict),
    "candidate_sha": _optional(lambda v: isinstance(v, str) and bool(HEX.match(v))),
    "candidate_file": _optional(_line),
    "source": _optional(lambda v: isinstance(v, str)),
    "rebaseline": _optional(lambda v: isinstance(v, bool)),
    "no_profile": _optional(lambda v: isinstance(v, bool)),
    "metric": _optional(_number),
    "metric_spread": _optional(_number),
    "wall_s": _optional(_number),
    "reason": _optional(lambda v: isinstance(v, str)),
    "profile_md": _optional(lambda v: isinstance(v, str)),
    "profile": _optional(lambda v: isinstance(v, dict)),
    "strip_png": _optional(_base64),
}
FACT_NUMBERS = ("median_s", "spread_s", "min_s", "max_s", "warmup_s", "max_abs")
FACT_TEXT = ("gpu", "weights_kind", "torch", "cuda", "cudnn", "sandbox", "paired_error")


def _facts_bad(facts: dict[str, Any]) -> list[str]:
    bad = [f"facts.{k}" for k in FACT_NUMBERS if not _optional(_number)(facts.get(k))]
    quality = facts.get("quality")  # a PSNR is infinite for an output equal to its reference
    if quality is not None and not (_number(quality) or quality in (float("inf"), float("-inf"))):
        bad.append("facts.quality")
    bad += [f"facts.{k}" for k in FACT_TEXT if facts.get(k) is not None and not _line(str(facts[k]))]
    times = facts.get("times_s")
    if times is not None and not _seconds_list(times):
        bad.append("facts.times_s")
    paired = facts.get("paired")
    if paired is not None and not (isinstance(paired, dict) and isinstance(paired.get("keeper_sha"), str)
                                   and bool(HEX.match(paired["keeper_sha"])) and _seconds_list(paired.get("keeper_times_s"))
                                   and isinstance(times, list) and len(paired["keeper_times_s"]) == len(times)
                                   and all(_optional(_number)(paired.get(k)) for k in ("keeper_warmup_s", "keeper_median_s"))):
        bad.append("facts.paired")
    fit = facts.get("memory_check")  # the keep rule reads it (harness/measure/memory_limit.py)
    if fit is not None and not (isinstance(fit, dict) and _number(fit.get("gb")) and fit["gb"] > 0
                                and isinstance(fit.get("passed"), bool) and _line(fit.get("reason"))):
        bad.append("facts.memory_check")
    return bad


def check_measured(rec: Any, goals: dict[str, Any]) -> None:
    """Refused unless every field apply uses has the type and range the measuring half gives it."""
    if not isinstance(rec, dict):
        raise Refused("a record must be a JSON object")
    bad = sorted(set(rec) - set(MEASURED_FIELDS) - {"would_be", "gpu_index"})  # a field no Record has
    bad += [k for k, ok in MEASURED_FIELDS.items() if not ok(rec.get(k))]
    bad += [k for k in ("would_be", "gpu_index") if not STORED_FIELDS[k](rec.get(k))]
    facts = rec.get("facts") if isinstance(rec.get("facts"), dict) else {}
    bad += _facts_bad(facts)
    if rec.get("preset") not in goals["presets"]:
        bad.append("preset (not a preset of goals.json)")
    if rec.get("outcome") == "measured" and not (_number(rec.get("metric")) and _number(rec.get("metric_spread"))
                                                 and _number(facts.get("median_s")) and isinstance(rec.get("source"), str)
                                                 and rec.get("candidate_sha")):
        bad.append("a measured record's metric, median_s, source and candidate_sha")
    if bad:
        raise Refused(f"the record's {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not what run_experiment writes")


FIELDS = {f.name for f in dataclasses.fields(Record)}
STORED_FIELDS: dict[str, Any] = {
    **{k: _optional(check) for k, check in MEASURED_FIELDS.items() if k not in ("source", "strip_png")},
    "desc": _line, "preset": _line, "exp": lambda v: exp_number(v) >= 0, "status": lambda v: v in STATUSES,
    "facts": lambda v: isinstance(v, dict), "source_sha256": _optional(lambda v: isinstance(v, str) and bool(SHA256.match(v))),
    "would_be": _optional(lambda v: v in STATUSES), "gpu_index": _optional(lambda v: isinstance(v, (str, int)) and not isinstance(v, bool) and _line(str(v))),
    "commit": _optional(_line), "speedup_vs_fp32": _optional(_number), "verdict": _optional(_line),
    "profile_file": _optional(_file), "strip_file": _optional(_file), "legacy": lambda v: isinstance(v, dict),
    "migrated": _optional(lambda v: isinstance(v, dict) and isinstance(v.get("cells", {}), dict)
                          and set(v.get("cells", {})) <= set(COLUMNS) and all(map(_line, v.get("cells", {}).values()))),
    "lost": _optional(_line),
}


def check_stored(data: Any) -> None:
    """Refused unless `data` is a record as the store writes it: no field unknown to Record, each of its type."""
    if not isinstance(data, dict):
        raise Refused("a record must be a JSON object")
    bad = sorted(set(data) - FIELDS) + [k for k in ("exp", "status", "desc", "preset") if k not in data]
    bad += [k for k, ok in STORED_FIELDS.items() if k in data and not ok(data[k])]
    bad += _facts_bad(data["facts"]) if isinstance(data.get("facts"), dict) else []
    if bad:
        raise Refused(f"the record's {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not what the store writes")
