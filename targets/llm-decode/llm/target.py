"""This target's adapter (goals.json "adapter": "llm.target"): Qwen2.5-0.5B generating tokens.

The contract the harness relies on:
- load_model(device="cpu") -> the frozen Qwen2ForCausalLM in fp32, eval, no grad: the published
  checkpoint when assets/Qwen2.5-0.5B/ holds one (python -m llm.download), else synthetic weights;
- weights_kind() -> "synthetic" | "published";  weights_id() -> a cheap identity of the weights;
- make_input(shape, seed, device="cpu") -> int64 token ids [B, R, N] (decode.py: the layout);
- reference(model, x) -> float32 logits [B, N, vocab], the frozen teacher-forced generation;
- output_shape(shape) -> [B, N, vocab];  flops(shape) -> FLOPs of one call;
- compare(out, ref, gate) -> {"passed", "reason", "quality" (max KL, nats), "max_abs", ...}.
"""

from __future__ import annotations

from pathlib import Path

from ._adapter import LLMTarget
from .config import QWEN25_05B

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "assets" / "Qwen2.5-0.5B"

_target = LLMTarget(QWEN25_05B, CHECKPOINT_DIR)
load_model = _target.load_model
weights_kind = _target.weights_kind
weights_id = _target.weights_id
make_input = _target.make_input
reference = _target.reference
output_shape = _target.output_shape
compare = _target.compare
flops = _target.flops
