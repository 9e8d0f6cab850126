"""request.json: what the agent asks of its door (harness/cli/door.py), parsed by our own strict schema.

The schema is an allow-list of the agent's choices; the person's powers (apply a record, measure
into a file, re-baseline, run unsandboxed, pick another project or device) do not exist in it, so
no spelling of one can be asked for: an unknown key is refused, one line naming it.

    {"run": "experiment", "desc": "what and why", "preset"?: P, "no_profile"?: bool}
    {"run": "wave", "candidates": ["candidates/a.py", ...], "desc"?: "...", "preset"?: P, "no_profile"?: bool}
    {"run": "verify" | "bench" | "profile", "candidate": "optimize.py" | "candidates/x.py", "preset"?: P}
    {"run": "floor", "preset"?: P}

P is one of goals.json's presets; a wave's "desc" defaults to each file's docstring. The bytes are
UTF-8 JSON, one object, no repeated key, no NaN. Standard library only (a refusal costs no torch).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

CAP = 64 << 10
RUNS = {  # run -> (keys it may hold, keys it must hold)
    "experiment": ({"run", "desc", "preset", "no_profile"}, {"run", "desc"}),
    "wave": ({"run", "candidates", "desc", "preset", "no_profile"}, {"run", "candidates"}),
    "verify": ({"run", "candidate", "preset"}, {"run", "candidate"}),
    "bench": ({"run", "candidate", "preset"}, {"run", "candidate"}),
    "profile": ({"run", "candidate", "preset"}, {"run", "candidate"}),
    "floor": ({"run", "preset"}, {"run"}),
}
VARIANT = re.compile(r"candidates/[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.py")
MAX_DESC = 500
MAX_WAVE = 64
# Said when a key looks like one of the person's powers (the refusal is the same either way).
POWERS = {"apply", "recordout", "measureonly", "measure", "unsandboxed", "rebaseline", "bestmedian", "goals",
          "device", "timeout", "out", "framesout", "force", "memorygb", "gpus", "repeat", "memberwall"}


class BadRequest(ValueError):
    """request.json is not what the agent may ask: str() is the one line to print."""


@dataclass(frozen=True)
class Request:
    run: str
    desc: str | None = None
    preset: str | None = None
    no_profile: bool = False
    candidate: str | None = None            # verify, bench, profile
    candidates: tuple[str, ...] = ()        # wave

    def files(self) -> tuple[str, ...]:
        """The agent's files this request measures (paths from the target's folder)."""
        return self.candidates or ((self.candidate,) if self.candidate else ())


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise BadRequest(f"request.json names {repeated[0]!r} twice")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise BadRequest(f"request.json holds {name}, which is not JSON")


def _line(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and len(value) <= MAX_DESC and \
        not any(ord(c) < 32 or 127 <= ord(c) < 160 or c in "\u2028\u2029" for c in value)


def parse(data: bytes, presets: Iterable[str], candidate: str) -> Request:
    """The request in `data` (request.json's bytes); BadRequest naming the first thing wrong.
    `presets`: goals.json's; `candidate`: goals.json's editable file (optimize.py)."""
    if len(data) > CAP:
        raise BadRequest(f"request.json holds {len(data)} bytes, more than {CAP}")
    try:
        obj = json.loads(data.decode("utf-8"), object_pairs_hook=_no_repeats, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise BadRequest("request.json is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise BadRequest(f"request.json is not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    if not isinstance(obj, dict):
        raise BadRequest('request.json must be one JSON object, e.g. {"run": "experiment", "desc": "what and why"}')
    run = obj.get("run")
    if not isinstance(run, str) or run not in RUNS:
        raise BadRequest(f'request.json "run" must be one of {", ".join(RUNS)}, not {str(run)[:60]!r}')
    allowed, required = RUNS[run]
    for key in sorted(set(obj) - allowed):
        plain = re.sub(r"[^a-z]", "", key.lower())
        whose = " is the person's (auto-optim), never the agent's" if plain in POWERS else " is not one it may hold"
        raise BadRequest(f'request.json key {key[:60]!r}{whose}; a "{run}" request holds {", ".join(sorted(allowed))}')
    missing = sorted(required - set(obj))
    if missing:
        raise BadRequest(f'request.json: a "{run}" request needs "{missing[0]}"')
    desc = obj.get("desc")
    if desc is not None and not _line(desc):
        raise BadRequest(f'request.json "desc" must be one line of text (1 to {MAX_DESC} characters, no control '
                         "characters)")
    preset = obj.get("preset")
    names = sorted(presets)
    if preset is not None and (not isinstance(preset, str) or preset not in names):
        raise BadRequest(f'request.json "preset" must be one of goals.json\'s presets ({", ".join(names)}), '
                         f"not {str(preset)[:60]!r}")
    no_profile = obj.get("no_profile", False)
    if not isinstance(no_profile, bool):
        raise BadRequest('request.json "no_profile" must be true or false')
    one = obj.get("candidate")
    if one is not None and not (isinstance(one, str) and (one == candidate or VARIANT.fullmatch(one))):
        raise BadRequest(f'request.json "candidate" must be {candidate} or candidates/NAME.py, not {str(one)[:80]!r}')
    many = obj.get("candidates")
    if many is not None:
        if not isinstance(many, list) or not 1 <= len(many) <= MAX_WAVE:
            raise BadRequest(f'request.json "candidates" must be a list of 1 to {MAX_WAVE} files candidates/NAME.py')
        bad = [f for f in many if not (isinstance(f, str) and VARIANT.fullmatch(f))]
        if bad:
            raise BadRequest(f'request.json "candidates" holds {str(bad[0])[:80]!r}, not candidates/NAME.py')
    return Request(run, desc, preset, no_profile, one, tuple(many or ()))
