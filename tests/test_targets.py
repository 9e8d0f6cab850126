"""Targets are folders (issue 42, item 1): pyproject.toml names the default, `--target NAME` picks
another, and a target's packages import by name through harness/target/ and nothing else of its
folder does (no sys.path edit)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from pathlib import Path

import pytest

from harness import paths, target

REPO = Path(__file__).resolve().parent.parent


def test_the_default_target_is_pyprojects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(paths.GOALS_ENV, raising=False)
    assert paths.default_target() == "wan-vae"
    assert paths.goals_path() == REPO / "targets" / "wan-vae" / "goals.json"


def test_target_option_selects_a_target_and_refuses_an_unknown_one(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv(paths.GOALS_ENV, raising=False)
    p = argparse.ArgumentParser(prog="tool")
    paths.add_target_option(p)
    assert p.parse_args(["--target", "llm-decode"]).target == "llm-decode"
    assert paths.goals_path() == REPO / "targets" / "llm-decode" / "goals.json"  # and the tool's children's
    for bad in ("nosuch", "../wan-vae", "-x"):
        with pytest.raises(SystemExit) as e:
            p.parse_args([f"--target={bad}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and err[0].startswith("tool: refused: "), err


def test_only_a_targets_packages_import_by_name(tmp_path: Path) -> None:
    """A package at the top of the target's folder imports by name; a module file there (optimize.py,
    a planted torch.py) never does, and a planted package named as an installed or standard module
    never replaces it: the finder is asked after the interpreter's own."""
    folder = tmp_path / "targets" / "planted"
    (folder / "planted_pkg_e42").mkdir(parents=True)
    (folder / "planted_pkg_e42" / "__init__.py").write_text("WHERE = 'target'\n")
    (folder / "planted_mod_e42.py").write_text("raise SystemExit('planted module imported')\n")
    (folder / "torch.py").write_text("raise SystemExit('planted torch imported')\n")
    for name in ("colorsys", "numpy"):  # a standard module and an installed one, as packages of the target
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text("raise SystemExit('planted package imported')\n")
    assert set(target.packages(folder)) == {"planted_pkg_e42", "colorsys", "numpy"}
    assert importlib.util.find_spec("planted_pkg_e42") is None
    target.use(folder)
    assert importlib.import_module("planted_pkg_e42").WHERE == "target"
    assert importlib.util.find_spec("planted_mod_e42") is None
    for name in ("torch", "colorsys", "numpy"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and not Path(spec.origin).is_relative_to(tmp_path), (name, spec.origin)
