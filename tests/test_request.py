"""harness/cli/request.py: request.json, the agent's only way to say what its door does, is an allow-list;
the person's powers do not exist in it, in any spelling, as a key or hidden in a value."""

from __future__ import annotations

import json

import pytest

from harness.cli import request as R

PRESETS = ("full", "tiny")


def parse(obj) -> R.Request:
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return R.parse(data, PRESETS, "optimize.py")


def refused(obj) -> str:
    with pytest.raises(R.BadRequest) as e:
        parse(obj)
    why = str(e.value)
    assert why.startswith("request.json") and "\n" not in why and len(why) < 400, why
    return why


def test_what_the_agent_may_ask():
    assert parse({"run": "experiment", "desc": "bf16 weights"}) == R.Request("experiment", "bf16 weights")
    r = parse({"run": "experiment", "desc": "x", "preset": "tiny", "no_profile": True})
    assert (r.preset, r.no_profile, r.files()) == ("tiny", True, ())
    r = parse({"run": "wave", "candidates": ["candidates/a.py", "candidates/b_2.v1.py"]})
    assert r.files() == ("candidates/a.py", "candidates/b_2.v1.py") and r.desc is None
    for run in ("verify", "bench", "profile"):
        assert parse({"run": run, "candidate": "optimize.py"}).files() == ("optimize.py",)
        assert parse({"run": run, "candidate": "candidates/a.py", "preset": "full"}).candidate == "candidates/a.py"
    assert parse({"run": "floor"}) == R.Request("floor")
    assert parse('{"run": "experiment", "desc": "accents \u00e9 and \u03bb are text"}'.encode()).desc.startswith("accents")


# The person's powers, spelled every way an agent might try (the old guard's parser gaps, as keys).
POWERS = ["apply", "--apply", "Apply", "APPLY", "app", "record_out", "record-out", "--record-out", "recordOut",
          "measure_only", "measure-only", "measure", "unsandboxed", "--unsandboxed", "un_sandboxed", "Unsandboxed",
          "unsand", "rebaseline", "re-baseline", "--rebaseline", "rebase", "best_median", "goals", "AUTO_OPTIM_GOALS",
          "device", "timeout", "out", "frames_out", "force", "memory_gb", "gpus", "repeat", "member_wall", "run ",
          "desc\u200b", "candidate"]


@pytest.mark.parametrize("key", POWERS)
def test_a_power_is_no_key_of_the_schema(key: str):
    why = refused({"run": "experiment", "desc": "x", key: True})
    assert repr(key)[:40].strip("'") in why or key[:30] in why


@pytest.mark.parametrize("obj, names", [
    ({"run": "experiment --apply f", "desc": "x"}, '"run"'),
    ({"run": "--apply", "desc": "x"}, '"run"'),
    ({"run": ["experiment"], "desc": "x"}, '"run"'),
    ({"desc": "x"}, '"run"'),
    ({"run": "experiment"}, '"desc"'),
    ({"run": "experiment", "desc": "x", "preset": "--unsandboxed"}, '"preset"'),
    ({"run": "experiment", "desc": "x", "preset": "full --rebaseline"}, '"preset"'),
    ({"run": "experiment", "desc": "x", "preset": ["tiny"]}, '"preset"'),
    ({"run": "experiment", "desc": "x", "no_profile": "true"}, '"no_profile"'),
    ({"run": "experiment", "desc": "x", "no_profile": 1}, '"no_profile"'),
    ({"run": "experiment", "desc": "two\nlines"}, '"desc"'),
    ({"run": "experiment", "desc": "tab\there"}, '"desc"'),
    ({"run": "experiment", "desc": "nul\x00"}, '"desc"'),
    ({"run": "experiment", "desc": "sep\u2028x"}, '"desc"'),
    ({"run": "experiment", "desc": "   "}, '"desc"'),
    ({"run": "experiment", "desc": "x" * 501}, '"desc"'),
    ({"run": "experiment", "desc": 7}, '"desc"'),
    ({"run": "verify", "candidate": "../optimize.py"}, '"candidate"'),
    ({"run": "verify", "candidate": "/home/u/.config/auto-optim/record-key"}, '"candidate"'),
    ({"run": "verify", "candidate": "candidates/../../x.py"}, '"candidate"'),
    ({"run": "verify", "candidate": "candidates/sub/x.py"}, '"candidate"'),
    ({"run": "verify", "candidate": "candidates/.hidden.py"}, '"candidate"'),
    ({"run": "verify", "candidate": "candidates/x.py\n"}, '"candidate"'),
    ({"run": "verify", "candidate": "candidates/x"}, '"candidate"'),
    ({"run": "verify", "candidate": "optimize.py "}, '"candidate"'),
    ({"run": "verify", "candidate": "goals.json"}, '"candidate"'),
    ({"run": "profile", "candidate": "candidates/x.py", "desc": "x"}, "'desc'"),
    ({"run": "wave", "candidates": []}, '"candidates"'),
    ({"run": "wave", "candidates": "candidates/a.py"}, '"candidates"'),
    ({"run": "wave", "candidates": ["candidates/a.py", "optimize.py"]}, '"candidates"'),
    ({"run": "wave", "candidates": ["candidates/a.py"] * 65}, '"candidates"'),
    ({"run": "wave", "candidates": [["candidates/a.py"]]}, '"candidates"'),
    ({"run": "floor", "candidate": "optimize.py"}, "'candidate'"),
    (["run", "experiment"], "one JSON object"),
    ("experiment", "one JSON object"),
])
def test_each_refusal_is_one_line_naming_the_key(obj, names: str):
    assert names in refused(obj)


@pytest.mark.parametrize("data, says", [
    (b'{"run": "experiment", "desc": "x", "desc": "y"}', "twice"),
    (b'{"run": "experiment", "desc": "x", "no_profile": NaN}', "NaN"),
    (b'{"run": "experiment", "desc": "x"} {"run": "wave"}', "not JSON"),
    (b'{"run": "experiment", "desc": "\xff"}', "not UTF-8"),
    (b'{"run": "experiment", "desc": "x"' + b" " * R.CAP, f"more than {R.CAP}"),
    (b"", "not JSON"),
])
def test_bytes_that_are_not_one_plain_json_object(data: bytes, says: str):
    assert says in refused(data)
