"""This target's adapter (goals.json "adapter": "llm.target"): Qwen2.5-0.5B generating tokens.

The contract the harness relies on (the functions are _adapter.LLMTarget's, bound to the spec):
- load_model(device="cpu") -> the frozen Qwen2ForCausalLM in fp32, eval, no grad: the published
  checkpoint when assets/Qwen2.5-0.5B/ holds one (python -m llm.download), else synthetic weights;
- weights_kind() -> "synthetic" | "published";  weights_id() -> a cheap identity of the weights;
- make_input(shape, seed, device="cpu") -> int64 token ids [B, R, N], the prompt (decode.py: the layout);
- reference(model, x) -> float32 logits [B, N, vocab], the frozen model's own greedy generation
  (the benchmark input's stored reference, and the harness's baseline);
- reference_for_output(model, x, out) -> float32 logits [B, N, vocab]: the frozen model's logits
  along the greedy path of `out` itself. Its presence tells the harness to check every call
  against it, computed after the call on its own copy of the model, instead of a stored reference;
- output_shape(shape) -> [B, N, vocab];  flops(shape) -> FLOPs of one call;  min_bytes(shape) -> the
  bytes a call cannot avoid reading (its floor: goals.json "floor");
- compare(out, ref, gate) -> {"passed", "reason", "quality" (max KL, nats), "max_abs", ...}.
"""

from __future__ import annotations

from pathlib import Path

from ._adapter import FUNCTIONS, functions
from .config import QWEN25_05B

CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "assets" / "Qwen2.5-0.5B"

globals().update(functions(QWEN25_05B, CHECKPOINT_DIR))
__all__ = [*FUNCTIONS, "CHECKPOINT_DIR"]
