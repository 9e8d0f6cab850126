"""The same adapter on a tiny Qwen2 configuration (config.TINY), for tests and CI on a CPU.

Point a goals file at it ("adapter": "llm.target_tiny") to run the whole harness on this target
in seconds; everything but the model's size is the real target's (target.py has the contract).
"""

from __future__ import annotations

from pathlib import Path

from ._adapter import FUNCTIONS, functions
from .config import TINY

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "assets" / "tiny-qwen2"

globals().update(functions(TINY, CHECKPOINT_DIR))
__all__ = [*FUNCTIONS, "CHECKPOINT_DIR"]
