"""The model configurations this target knows: the real size and a tiny one for tests and CI.

QWEN25_05B is the architecture of the published Qwen/Qwen2.5-0.5B config.json (494 M parameters:
24 layers, hidden 896, 14 query heads and 2 key/value heads of 64, vocabulary 151936, tied
embeddings, q/k/v bias), written down here so synthetic weights need no download; llm.download
checks a fetched checkpoint against it (load.check_architecture).
TINY keeps every structural feature (GQA, biases, tied embeddings, RoPE) at a size that runs in
milliseconds on a CPU.

`logit_std` is used only by the synthetic weights: random weights give nearly flat logits, where
an equivalence figure such as KL means little. The final RMSNorm's gain is set so the logits
have this std, which peaks the next-token distributions as a trained model's usually are: mean
entropy measured 1.9 and 5.2 nats on two prompts for the 0.5B model (uniform: 11.9) and 3.9
for the tiny one (uniform: 6.9).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hf_repo: str | None  # the published checkpoint on the Hugging Face Hub, if any
    config: dict[str, Any] = field(default_factory=dict)
    logit_std: float = 0.0  # synthetic weights only; 0 leaves the final norm's gain at 1


QWEN25_05B = ModelSpec(
    name="qwen2.5-0.5b",
    hf_repo="Qwen/Qwen2.5-0.5B",
    config={
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False,
        "bos_token_id": 151643, "eos_token_id": 151643,
    },
    logit_std=4.2,
)

TINY = ModelSpec(
    name="tiny-qwen2",
    hf_repo=None,
    config={
        "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False,
    },
    logit_std=2.8,
)

# The fields a checkpoint's config.json must agree with for it to count as this target's model.
ARCH_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "vocab_size", "tie_word_embeddings")


def hf_config(spec: ModelSpec):
    """The transformers Qwen2Config of a spec (fp32, SDPA attention)."""
    from transformers import Qwen2Config

    cfg = dict(spec.config)
    rope_theta = cfg.pop("rope_theta")
    config = Qwen2Config(**cfg, rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    config._attn_implementation = "sdpa"
    return config
