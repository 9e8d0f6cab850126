"""The frozen evaluator: the tools a person runs (verify, bench, profile, run_experiment, wave, ...)
and what they are built on (README, "How it works").

The import path, in one place, whichever way a tool starts: `python harness/x.py` (its one line
appends the repository, so this package imports) or `python -m harness.x` (the current folder
comes first). The repository root goes last, since the agent writes there and a planted torch.py
must never be imported in place of an installed module by the harness, which runs unsandboxed;
harness/ itself leaves sys.path, so its profile.py never passes for the standard `profile`.
"""

import sys as _sys
from pathlib import Path as _Path


def _settle_path() -> None:
    here = _Path(__file__).resolve().parent
    kept = []
    for entry in _sys.path:
        try:
            where = _Path(entry or ".").resolve()
        except (OSError, RuntimeError):
            where = None
        if where not in (here, here.parent):
            kept.append(entry)
    _sys.path[:] = kept + [str(here.parent)]


_settle_path()
