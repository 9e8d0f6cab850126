"""The same adapter on a tiny Qwen2 configuration (config.TINY), for tests and CI on a CPU.

Point a goals file at it ("adapter": "llm.target_tiny") to run the whole harness on this target
in seconds; everything but the model's size is the real target's (target.py has the contract).
"""

from __future__ import annotations

from pathlib import Path

from ._adapter import LLMTarget
from .config import TINY

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "assets" / "tiny-qwen2"

_target = LLMTarget(TINY, CHECKPOINT_DIR)
load_model = _target.load_model
weights_kind = _target.weights_kind
weights_id = _target.weights_id
make_input = _target.make_input
reference = _target.reference
output_shape = _target.output_shape
compare = _target.compare
flops = _target.flops
