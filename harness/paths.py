"""Where things are: the project, its targets (targets/NAME/, one folder each), the default target
(pyproject.toml's `[tool.auto-optim] target`) and the goals file a tool reads.

Which goals file: AUTO_OPTIM_GOALS when set (the tests' and scripts' override, for a goals file
outside targets/; `--target NAME` sets it too, so a tool's children read the same target), else
the default target's. Standard library only: the agent's door reads it before torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tomllib
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
TARGETS = "targets"
GOALS_ENV = "AUTO_OPTIM_GOALS"
NAME = re.compile(r"[A-Za-z][\w-]*")


def agent_policy():
    """agent/policy.py (what the agent may do; outside the harness and its frozen hash), loaded by
    its file's location: the project's, which this module's folder names (no sys.path edit)."""
    module = sys.modules.get("_auto_optim_agent_policy")
    if module is None:
        spec = importlib.util.spec_from_file_location("_auto_optim_agent_policy", PROJECT / "agent" / "policy.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


class TargetError(Exception):
    """No such target, or pyproject.toml names none: one line, the tool exits 2."""


def default_target(project: Path = PROJECT) -> str:
    """The target pyproject.toml names (`[tool.auto-optim] target = "NAME"`)."""
    where = project / "pyproject.toml"
    try:
        name = tomllib.loads(where.read_text())["tool"]["auto-optim"]["target"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise TargetError(f"{where} names no default target ([tool.auto-optim] target = \"NAME\"): {e}") from None
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise TargetError(f"{where}: [tool.auto-optim] target must be a target's folder name, not {name!r}")
    return name


def target_folder(name: str, project: Path = PROJECT) -> Path:
    """targets/NAME/ of the project, which must hold a goals.json."""
    if not NAME.fullmatch(name or ""):
        raise TargetError(f"target {name!r}: a folder name under {TARGETS}/ (letters, digits, - and _)")
    folder = project / TARGETS / name
    if not (folder / "goals.json").is_file():
        known = sorted(p.parent.name for p in (project / TARGETS).glob("*/goals.json"))
        raise TargetError(f"no target {name!r}: {folder}/goals.json does not exist (targets: {', '.join(known) or 'none'})")
    return folder


def goals_path() -> Path:
    """The goals file the harness reads (see the module docstring)."""
    if os.environ.get(GOALS_ENV):
        return Path(os.environ[GOALS_ENV]).resolve()
    return (target_folder(default_target()) / "goals.json").resolve()


def select(name: str) -> Path:
    """Make targets/NAME/ this process's target, and its children's (AUTO_OPTIM_GOALS)."""
    goals = target_folder(name) / "goals.json"
    os.environ[GOALS_ENV] = str(goals)
    return goals


class _Select(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        try:
            select(value)
        except TargetError as e:
            print(f"{parser.prog}: refused: {e}", file=sys.stderr)
            parser.exit(2)
        setattr(namespace, self.dest, value)


def add_target_option(parser: argparse.ArgumentParser) -> None:
    """`--target NAME` on a person's tool: the target it works on (default: pyproject.toml's)."""
    parser.add_argument("--target", action=_Select, metavar="NAME",
                        help="the target to work on, targets/NAME/ (default: pyproject.toml's [tool.auto-optim] target)")
