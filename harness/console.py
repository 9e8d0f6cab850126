"""What every tool prints and how it ends: human lines, `key: value` lines and one JSON line; one line
and exit 130 on Ctrl-C."""

from __future__ import annotations

import json
import re
import sys
from typing import Any


def slug(text: str) -> str:
    """A machine's name as a file name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def plural(n: int, word: str) -> str:
    """'1 row', '2 rows'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def run_cli(main: Any, name: str, interrupted: str = "") -> int:
    """A tool's entry point: Ctrl-C ends it with one line and exit 130, not a traceback."""
    try:
        return main()
    except KeyboardInterrupt:
        print(f"{name}: interrupted (Ctrl-C)" + (f"; {interrupted}" if interrupted else ""), file=sys.stderr)
        return 130


def emit(human: list[str], facts: dict[str, Any]) -> None:
    """The output format of every tool: lines for a person, `key: value` lines, one JSON line."""
    for line in human:
        print(line)
    for key, value in facts.items():
        if value not in (None, "") and not isinstance(value, (dict, list)):  # a key with nothing to say is left out
            print(f"{key}: {value}")
    print(json.dumps(facts, default=str))
    sys.stdout.flush()
