"""The adapter functions, bound to one model spec (target.py and target_tiny.py expose them).

The harness knows nothing about LLMs: it loads the model, makes inputs, runs the reference,
compares and counts FLOPs only through these functions (the contract is in target.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from . import gate
from .config import ModelSpec
from .decode import greedy_logits, logits_along, split
from .load import checkpoint_sha256, has_checkpoint, published_model, synthetic_model
from .weights import SEED, code_hash


class LLMTarget:
    def __init__(self, spec: ModelSpec, checkpoint_dir: Path) -> None:
        self.spec = spec
        self.checkpoint_dir = Path(checkpoint_dir)

    def load_model(self, device: str | torch.device = "cpu") -> nn.Module:
        """The frozen model in fp32: the checkpoint in checkpoint_dir if there is one, else synthetic."""
        if has_checkpoint(self.checkpoint_dir):
            return published_model(self.spec, self.checkpoint_dir, device)
        return synthetic_model(self.spec, device)

    def weights_kind(self) -> str:
        return "published" if has_checkpoint(self.checkpoint_dir) else "synthetic"

    def weights_id(self) -> str:
        if has_checkpoint(self.checkpoint_dir):
            return f"published:{self.spec.name}:sha256:{checkpoint_sha256(self.checkpoint_dir)}"
        return f"synthetic:{self.spec.name}:seed{SEED}:code{code_hash()}"

    def make_input(self, shape: list[int], seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
        """Token ids [B, R, N] drawn uniformly from the whole vocabulary (numpy's PCG64, which takes
        the whole seed: the same ids on every machine)."""
        split(shape)
        rng = np.random.default_rng(seed)
        return torch.from_numpy(rng.integers(0, self.spec.config["vocab_size"], tuple(shape))).to(device)

    def reference(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The frozen model's own greedy generation (decode.greedy_logits): the benchmark input's
        stored reference and the baseline; calls are checked with reference_for_output."""
        return greedy_logits(model, x)

    def reference_for_output(self, model: nn.Module, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """What `out` is compared with: the frozen model's logits along out's own greedy path
        (decode.logits_along), computed by the harness after each call."""
        return logits_along(model, x, out)

    def output_shape(self, shape: list[int]) -> list[int]:
        b, _, n = split(shape)
        return [b, n, self.spec.config["vocab_size"]]

    def compare(self, out: Any, ref: torch.Tensor, gate_cfg: dict[str, Any]) -> dict[str, Any]:
        return gate.compare(out, ref, gate_cfg)

    def min_bytes(self, shape: list[int]) -> float:
        """Bytes a call cannot avoid reading (goals.json "floor"): every weight once for each of the
        N generated tokens (the prefill makes the first), in bf16."""
        c = self.spec.config
        d, kv = c["hidden_size"], c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"])
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * c["intermediate_size"]
        params = c["num_hidden_layers"] * per_layer + c["vocab_size"] * d  # the LM head reads the tied embedding
        b, _, n = split(shape)
        return float(b * n * 2 * params)

    def flops(self, shape: list[int]) -> float:
        """FLOPs of one call, counted from the config: every projection for the P + N - 1 tokens
        fed, causal attention (QK^T and AV over the tokens before each), and the LM head for the
        N generated positions only (the prefill keeps one position's logits, as generate does)."""
        c = self.spec.config
        b, p, n = split(shape)
        d, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
        head_dim = d // c["num_attention_heads"]
        kv = c["num_key_value_heads"] * head_dim
        per_layer_params = 2 * d * d + 2 * d * kv + 3 * d * inter
        fed = p + n - 1  # the prompt, then every generated token but the last
        attended = fed * (fed + 1) // 2  # token t (0-based) attends to t + 1 keys
        total = (2 * layers * per_layer_params * fed + 4 * layers * d * attended + 2 * d * vocab * n)
        return float(b * total)


# The module-level functions an adapter module exposes (target.py has the contract).
FUNCTIONS = ("load_model", "weights_kind", "weights_id", "make_input", "reference", "reference_for_output",
             "output_shape", "compare", "flops", "min_bytes")


def functions(spec: ModelSpec, checkpoint_dir: Path) -> dict[str, Any]:
    """The adapter functions of one model spec, by name, for an adapter module's globals()."""
    target = LLMTarget(spec, checkpoint_dir)
    return {name: getattr(target, name) for name in FUNCTIONS}
