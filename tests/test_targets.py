"""Targets are folders (issue 42, item 1): pyproject.toml names the default, `--target NAME` picks
another, and a target's packages import by name through harness/target/ and nothing else of its
folder does (no sys.path edit)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
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


def test_only_a_targets_packages_import_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The packages goals.json declares (the adapter's, the frozen code's) import by name, ahead of an
    installed module of the same name (a GPU image's top-level `model` hid the VAE's adapter:
    "adapter module model.target not found"); a module file there (optimize.py, a planted torch.py)
    and a planted package goals.json does not declare (numpy/, colorsys/) never do."""
    folder = tmp_path / "targets" / "planted"
    for name in ("planted_pkg_e42", "planted_frozen_e42"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"WHERE = 'target {name}'\n")
    (folder / "goals.json").write_text(json.dumps({"adapter": "planted_pkg_e42.target",
                                                    "frozen": ["planted_frozen_e42/split.py"]}))
    (folder / "planted_mod_e42.py").write_text("raise SystemExit('planted module imported')\n")
    (folder / "torch.py").write_text("raise SystemExit('planted torch imported')\n")
    for name in ("colorsys", "numpy"):  # a standard module and an installed one, as undeclared packages
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text("raise SystemExit('planted package imported')\n")
    installed = tmp_path / "site"  # an installed package named like the target's adapter package
    (installed / "planted_pkg_e42").mkdir(parents=True)
    (installed / "planted_pkg_e42" / "__init__.py").write_text("WHERE = 'installed'\n")
    monkeypatch.syspath_prepend(str(installed))  # as an installed package's folder (first: the finder must win anyway)
    assert set(target.packages(folder)) == {"planted_pkg_e42", "planted_frozen_e42"}
    assert importlib.util.find_spec("planted_frozen_e42") is None
    target.use(folder)
    assert importlib.import_module("planted_pkg_e42").WHERE == "target planted_pkg_e42"
    assert importlib.import_module("planted_frozen_e42").WHERE == "target planted_frozen_e42"
    assert importlib.util.find_spec("planted_mod_e42") is None
    for name in ("torch", "colorsys", "numpy"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and not Path(spec.origin).is_relative_to(tmp_path), (name, spec.origin)
