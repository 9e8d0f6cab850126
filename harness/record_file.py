"""Record files: what `run_experiment.py --measure-only --record-out` writes on a measuring machine
and `--apply` reads in the git checkout. Signed with the person's key (harness/signing.py), and
every field that apply uses checked for its type and range: no field is ever used as a path.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

from harness import _common
from harness import records
from harness import signing
from harness.paths import agent_policy
from harness.records import Refused

# runs/ is the harness's scratch (a wave's members write there), but its requests are the door's.
SCRATCH = "runs"


def check_record_out(path: Path) -> None:
    """A record file is a new .json (never written over a file) outside every path the agent may not
    write (agent/policy.py: the harness's code, goals, records, adapter, .claude/, .git/,
    .gitignore, ...), in this checkout and the target's folder; runs/ (not runs/requests/) is the
    harness's scratch, where a wave's members write theirs."""
    named, real = Path(os.path.abspath(path)), path.resolve()
    why = "it is not a .json file" if named.suffix != ".json" else \
        "it exists: a record is never written over a file" if os.path.lexists(named) or real.exists() else None
    policy = agent_policy()
    for project in dict.fromkeys((_common.REPO, _common.root().resolve())):
        trusted = [p for p in policy.protected_paths(project) if p.rsplit("/", 1)[-1] != SCRATCH]
        trusted += [p + "/requests" for p in policy.protected_paths(project) if p.rsplit("/", 1)[-1] == SCRATCH]
        for p in (named, real):
            rel = p.relative_to(project).as_posix() if p.is_relative_to(project) else None
            if why is None and rel is not None and (rel.endswith("goals.json") or policy.config_name(rel)
                                                    or any(rel == t or rel.startswith(t + "/") for t in trusted)):
                why = f"{rel} is the harness's (agent/policy.py protects it)"
    if why:
        raise Refused(f"--record-out {path}: {why}; a record goes to a new .json file of its own, not over goals.json, "
                      "harness/, records/, profiles/, quality/ or configuration (.claude/, .git/, ...)")


def write_record_file(path: Path, recs: list[dict[str, Any]]) -> None:
    """A --measure-only result: the experiments and their signature (harness/signing.py)."""
    body = {"experiments": recs}
    _common.atomic_write(path, json.dumps({**body, "signature": signing.sign(body)}, indent=1, default=str),
                         exclusive=True)


def read_record_file(path: Path, goals: dict[str, Any]) -> list[dict[str, Any]]:
    """The experiments of a record file that this key signed, each field checked; else Refused."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise Refused(f"cannot read record {path}: {e}") from None
    body = {"experiments": data.get("experiments")} if isinstance(data, dict) else None
    if body is None or not signing.verify(body, data.get("signature")):
        raise Refused(f"record {path} is not signed with this person's key ({signing.key_path()}): only a record "
                      "that run_experiment.py --measure-only wrote with it can be applied")
    recs = body["experiments"]
    if not isinstance(recs, list) or not recs:
        raise Refused(f"record {path} holds no experiments")
    for rec in recs:
        validate_record(rec, goals)
    return recs


HEX = re.compile(r"^[0-9a-f]{8,64}$")


OUTCOMES = ("measured", *records.RED)


def _text(v: Any) -> bool:
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


# Every field _apply reads from a record, and what it must be. No field is ever used as a path.
RECORD_FIELDS: dict[str, Any] = {
    "desc": lambda v: _text(v) and v.strip() != "",
    "preset": _text,  # and a preset of goals.json: validate_record
    "device": _optional(lambda v: v in ("cpu", "cuda")),  # the keep rule's memory clause applies on "cuda"
    "outcome": lambda v: v in OUTCOMES,
    "frozen_hash": lambda v: isinstance(v, str) and bool(HEX.match(v)),
    "timestamp": _text,
    "facts": lambda v: isinstance(v, dict),
    "candidate_sha": _optional(lambda v: isinstance(v, str) and bool(HEX.match(v))),
    "candidate_file": _optional(_text),
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


def validate_record(rec: Any, goals: dict[str, Any]) -> None:
    """Refused unless every field _apply uses has the type and range the measuring half gives it."""
    if not isinstance(rec, dict):
        raise Refused("a record must be a JSON object")
    bad = [k for k, ok in RECORD_FIELDS.items() if not ok(rec.get(k))]
    facts = rec.get("facts") if isinstance(rec.get("facts"), dict) else {}
    bad += [f"facts.{k}" for k in FACT_NUMBERS if not _optional(_number)(facts.get(k))]
    quality = facts.get("quality")  # a PSNR is infinite for an output equal to its reference
    if quality is not None and not (_number(quality) or quality in (float("inf"), float("-inf"))):
        bad.append("facts.quality")
    bad += [f"facts.{k}" for k in FACT_TEXT if facts.get(k) is not None and not _text(str(facts[k]))]
    times = facts.get("times_s")
    if times is not None and not _seconds_list(times):
        bad.append("facts.times_s")
    paired = facts.get("paired")
    if paired is not None and not (isinstance(paired, dict) and isinstance(paired.get("keeper_sha"), str)
                                   and bool(HEX.match(paired["keeper_sha"])) and _seconds_list(paired.get("keeper_times_s"))
                                   and isinstance(times, list) and len(paired["keeper_times_s"]) == len(times)
                                   and all(_optional(_number)(paired.get(k)) for k in ("keeper_warmup_s", "keeper_median_s"))):
        bad.append("facts.paired")
    fit = facts.get("memory_check")  # the keep rule reads it (harness/memory_limit.py)
    if fit is not None and not (isinstance(fit, dict) and _number(fit.get("gb")) and fit["gb"] > 0
                                and isinstance(fit.get("passed"), bool) and _text(fit.get("reason"))):
        bad.append("facts.memory_check")
    if rec.get("preset") not in goals["presets"]:
        bad.append("preset (not a preset of goals.json)")
    if rec.get("outcome") == "measured" and not (_number(rec.get("metric")) and _number(rec.get("metric_spread"))
                                                 and _number(facts.get("median_s")) and isinstance(rec.get("source"), str)
                                                 and rec.get("candidate_sha")):
        bad.append("a measured record's metric, median_s, source and candidate_sha")
    if bad:
        raise Refused(f"the record's {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not what run_experiment writes")
