"""goals.json is checked once, at load, key by key (issue 43, item 2): a wrong type or range, or a
missing gate or presets, is one line naming the key and exit 2 from every tool, never a traceback
(ValueError, KeyError) nor the frozen-hash message's --rebaseline; timed_runs is used as written or
refused with the reason. The three goals files the repository ships (the VAE's, the LLM's, the
scaffold's) pass it.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest

from conftest import add_record, use
from harness import goals as G
from harness.cli import new_target, run_experiment, verify

REPO = Path(__file__).resolve().parent.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder
SHIPPED = {"vae": VAE / "goals.json", "llm": REPO / "targets" / "llm-decode" / "goals.json",
           "toy": REPO / "tests" / "toy_target" / "goals.json"}


def scaffold_goals(tmp_path: Path) -> dict:
    new_target.scaffold("demo", tmp_path / "demo")
    return json.loads((tmp_path / "demo" / "goals.json").read_text())


def cli(tool, ws: Path, *args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with use(ws), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = tool(list(args))
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("name", [*SHIPPED, "scaffold"])
def test_the_shipped_goals_files_pass(name: str, tmp_path: Path) -> None:
    data = scaffold_goals(tmp_path) if name == "scaffold" else json.loads(SHIPPED[name].read_text())
    goals = G.parse(data, Path("goals.json"), complete=True)
    assert all(p.timed_runs >= G.min_timed_runs() for p in goals.presets.values())  # used as written: no raise


BAD = [  # (where, value, what the line says); the cases first
    (("noise_threshold",), "1%", "noise_threshold must be a number in [0, 1), not '1%'"),
    (("presets", "tiny", "timed_runs"), "five", "presets.tiny.timed_runs must be a whole number >= 6"),
    (("presets", "tiny", "timed_runs"), 5, "presets.tiny.timed_runs must be a whole number >= 6 (the keep rule times "
                                           "the candidate beside its keeper in at least 6 pairs"),
    (("noise_threshold",), 1.5, "noise_threshold must be a number in [0, 1), not 1.5"),
    (("warmup_gain",), "15%", "warmup_gain must be a number in [0, 1), or null, not '15%'"),
    (("metric", "better"), "faster", "metric.better must be 'lower' or 'higher', not 'faster'"),
    (("presets", "tiny", "input_shape"), [1, "48"], "presets.tiny.input_shape must be a list of whole numbers >= 1"),
    (("presets", "tiny", "warmup_runs"), 0, "presets.tiny.warmup_runs must be a whole number >= 1, not 0"),
    (("pool", "size"), "8", "pool.size must be a whole number >= 1, not '8'"),
    (("timeouts", "call_s"), -1, "timeouts.call_s must be a number of seconds above 0, not -1"),
    (("gate", "max_abs"), "0.25", "gate.max_abs must be a number, not '0.25'"),
    (("stop_rule", "plateau_attempts"), 0.5, "stop_rule.plateau_attempts must be a whole number >= 1, not 0.5"),
    (("floor", "work"), "time", "floor.work must be 'flops' or 'bytes', not 'time'"),
    (("adapter",), "", "adapter must be a module name"),
]


def edited(data: dict, where: tuple[str, ...], value) -> dict:
    data = copy.deepcopy(data)
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    return data


@pytest.mark.parametrize("name", [*SHIPPED, "scaffold"])
def test_each_wrong_key_is_one_line_naming_it(name: str, tmp_path: Path) -> None:
    """On every target's goals: the parse refuses, naming the key, its rule and the value found."""
    data = scaffold_goals(tmp_path) if name == "scaffold" else json.loads(SHIPPED[name].read_text())
    for where, value, says in BAD:
        if where[0] == "presets" and "tiny" not in data["presets"]:
            continue
        bad = edited(data, where, value) if where[0] in data or len(where) == 1 else \
            {**data, where[0]: {where[1]: value}}
        with pytest.raises(G.GoalsError) as e:
            G.parse(bad, Path("goals.json"), complete=True)
        assert str(e.value) == f"goals.json: {says}" or str(e.value).startswith(f"goals.json: {says}"), (where, str(e.value))
        assert "\n" not in str(e.value)
    for key in ("gate", "presets", "adapter", "stop_rule"):
        with pytest.raises(G.GoalsError, match=f"^goals.json: {key} is missing: it must be "):
            G.parse({k: v for k, v in data.items() if k != key}, Path("goals.json"), complete=True)


def test_run_experiment_and_verify_refuse_a_bad_goals_file_in_one_line(tmp_path: Path) -> None:
    """The issue's cases through the tools: exit 2 and one line (not ValueError's exit 1, not
    verify's KeyError traceback)."""
    good = json.loads(SHIPPED["toy"].read_text())
    for bad, says in ((good | {"noise_threshold": "1%"}, "noise_threshold must be a number in [0, 1), not '1%'"),
                      (edited(good, ("presets", "tiny", "timed_runs"), "five"), "presets.tiny.timed_runs must be"),
                      ({k: v for k, v in good.items() if k != "gate"}, "gate is missing"),
                      ({k: v for k, v in good.items() if k != "presets"}, "presets is missing")):
        (tmp_path / "goals.json").write_text(json.dumps(bad))
        code, out = cli(run_experiment.main, tmp_path, "--desc", "x", "--device", "cpu")
        refused = [ln for ln in out.splitlines() if ln.startswith("run_experiment: refused:")]
        assert code == 2 and len(refused) == 1 and says in refused[0] and "Traceback" not in out, out
        code, out = cli(verify.main, tmp_path, "--device", "cpu")
        lines = out.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("verify: setup error: ") and says in lines[0], out


def test_a_goals_file_that_does_not_validate_is_never_told_to_rebaseline(toy: Path, tmp_path: Path) -> None:
    """A goals file edited into a broken one also changes the frozen hash: the line is what is
    wrong with it, never 'rerun with --rebaseline', which would start a comparison on a broken file."""
    import shutil

    ws = shutil.copytree(toy, tmp_path / "toy", symlinks=True)
    goals = json.loads((ws / "goals.json").read_text())
    add_record(ws, {"exp": "e001", "status": "baseline", "preset": "tiny", "frozen_hash": "0" * 16})
    for bad in ({k: v for k, v in goals.items() if k != "gate"}, goals | {"noise_threshold": "1%"}):
        (ws / "goals.json").write_text(json.dumps(bad))
        code, out = cli(run_experiment.main, ws, "--desc", "x", "--device", "cpu")
        assert code == 2 and "--rebaseline" not in out and "goals.json: " in out, out
