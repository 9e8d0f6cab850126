"""One line on stderr as each long step of a run begins, with the seconds since the harness started:
`[  12.3 s] building and warming up the candidate`. A person watching a minutes-long run sees where
it is; a CI log gets a handful of lines a run."""

from __future__ import annotations

import sys
import time

START = time.monotonic()


def phase(text: str) -> None:
    print(f"[{time.monotonic() - START:6.1f} s] {text}", file=sys.stderr, flush=True)
