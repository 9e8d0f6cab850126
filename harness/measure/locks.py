"""The locks of runs/: one experiment (or one wave) per checkout, one measurement per GPU.

run_experiment.lock: one experiment or one wave (harness/cli/wave.py) per checkout; a second refuses
at once. device_<i>.lock: whoever measures on GPU i (CUDA_VISIBLE_DEVICES's first entry, else 0;
a preset of N ranks: the first N) holds it, and a second measurement there waits.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Any, Iterator

from harness import _common
from harness.errors import Refused
from harness.ledger.store import lock_file


def acquire_lock() -> Any:
    """One experiment (or one wave, harness/cli/wave.py) at a time per checkout: a second one refuses
    at once instead of measuring beside the first (both numbers would be wrong)."""
    f = lock_file(_common.root() / "runs" / "run_experiment.lock", wait=False)
    if isinstance(f, str):
        raise Refused(f"another experiment is running in this checkout ({f}); wait for it to finish")
    return f


def device_slots(gpus: int = 1) -> list[str]:
    """The GPUs this process measures on, as the wave names them: CUDA_VISIBLE_DEVICES's first
    `gpus` entries (a wave member's), else 0.. (torch's numbering). On a CPU a wave gives each
    member a slot too."""
    listed = [re.sub(r"[^\w-]", "", s) for s in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")]
    return ([s for s in listed if s] or [str(i) for i in range(gpus)])[:gpus]


def device_slot() -> str:
    return device_slots()[0]


@contextlib.contextmanager
def device_lock(gpus: int = 1) -> Iterator[None]:
    """Two measurements never share a GPU: whoever measures holds runs/device_<slot>.lock of each
    GPU it uses (a preset of several ranks: one a rank), and a second measurement on one of them
    waits for it (a wave's members queue this way). Taken in one order, so two never deadlock."""
    with contextlib.ExitStack() as held:
        for slot in sorted(device_slots(gpus)):
            path = _common.root() / "runs" / f"device_{slot}.lock"
            f = lock_file(path, wait=False)
            if isinstance(f, str):
                print(f"run_experiment: GPU {slot} is measuring ({f}); waiting for it", file=sys.stderr)
                f = lock_file(path, wait=True)
            held.enter_context(f)
        yield
