"""The frozen evaluator: the code that measures and judges a candidate, the sandbox it runs in, and the tools that run them."""

# How each caller finds this package (never through sys.path: the project root, which the agent writes, must never be on
# it, so that a planted torch.py is never imported in place of an installed one by this unsandboxed code): the person's
# `auto-optim` and the agent's `auto-optim-agent` are console scripts of the installed package (pip install -e .); the
# worker imports it from its folder by path (harness/worker/main.py); a tool's child (a wave's members, the tests' copies)
# by its folder too (harness/start.py). `python -m harness.x` from the root, a .pth naming the root, or `python harness/x/y.py`
# would put the root or a folder of this package on sys.path: refused here, before anything else of the harness is imported.

import sys as _sys
from pathlib import Path as _Path


def _refuse_the_root_on_sys_path() -> None:
    here = _Path(__file__).resolve().parent
    for entry in _sys.path:
        try:
            where = _Path(entry or ".").resolve()
        except (OSError, RuntimeError):
            continue
        on = where == here.parent or where.is_relative_to(here)  # the root; or harness/x/ (`python harness/x/y.py`)
        if on:
            print(f"harness: refused: {where} is on sys.path ({entry or 'the working folder'!r}): "
                  "a module the agent planted there would be imported; run `auto-optim VERB`, or "
                  "`python -P -m harness.cli.TOOL` with the package installed (pip install -e .)", file=_sys.stderr)
            raise SystemExit(2)


_refuse_the_root_on_sys_path()
