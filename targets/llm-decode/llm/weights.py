"""Deterministic synthetic weights: the same numbers on every machine, made in seconds.

Each parameter is drawn from its own CPU generator, seeded by the global seed and the
parameter's name, so the values do not depend on creation order or the device. torch.rand on a
CPU generator is mt19937 plus an exact 24-bit-to-float conversion (no transcendental function
whose last bit could differ between CPUs); (u - 0.5) * 2a is one correctly rounded IEEE step.
Matrices are uniform with std 1/sqrt(fan_in), so every projection keeps its input's scale and
every layer adds as much to the residual stream as the embedding holds. With transformers' fixed
std of 0.02 the 64-wide tiny model's residual stream was still mostly the input token's
embedding after its 4 layers (cosine 0.74), and the model only repeated its input token (its
argmax was the token just fed, 100% of the time). Biases have std
0.02, norm gains are 1, except the final norm's (config.py says why).

The query projection is scaled by QUERY_GAIN = 0.5, so attention scores have std 0.5 instead of
1. A random model has no structure to attend to: with unit scores every query spreads over the
whole context, and bf16 rounding of the scores was amplified through the layers (0.5B model, a
256-token prompt, bf16 against fp32: largest KL over the second half of the prompt 0.041 nats
at gain 1, 0.011 at 0.5, 0.45 at 2, 3.5 at 3). A model whose fp32 reference is that sensitive
would make bf16 look worse than it is on a trained model; 0.5 keeps the attention soft and the
error flat through the depth (hidden-state error 1.4% after layer 1, 2.0% after layer 24).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import nn

SEED = 20250514
BIAS_STD = 0.02
QUERY_GAIN = 0.5
CHUNK = 1 << 24  # elements per draw: bounds the CPU temporary when the target device is a GPU


def _param_seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{SEED}:{name}".encode()).digest()[:8], "little") >> 1


@torch.no_grad()
def fill_uniform_(param: torch.Tensor, name: str, std: float) -> None:
    """param[:] = uniform with mean 0 and `std`; element i is a pure function of (SEED, name, i)."""
    gen = torch.Generator(device="cpu").manual_seed(_param_seed(name))
    half_width = std * 3**0.5
    flat = param.view(-1)
    for start in range(0, flat.numel(), CHUNK):
        n = min(CHUNK, flat.numel() - start)
        u = torch.rand(n, generator=gen, dtype=torch.float32)
        flat[start:start + n].copy_(u.sub_(0.5).mul_(2 * half_width))


@torch.no_grad()
def fill_synthetic_(model: nn.Module, logit_std: float) -> None:
    """Overwrite every parameter of a Qwen2ForCausalLM with the synthetic values.

    The final norm's output has unit RMS per element and the (tied) embedding rows have std
    1/sqrt(hidden), so the logits have std equal to the final norm's gain: set to `logit_std`.
    """
    for name, p in model.named_parameters():
        if name == "model.norm.weight":
            p.fill_(logit_std or 1.0)
        elif name.endswith("norm.weight"):
            p.fill_(1.0)
        elif name.endswith("bias"):
            fill_uniform_(p, name, BIAS_STD)
        else:  # [out, in] projections and the [vocab, hidden] embedding: fan-in is dim 1
            fill_uniform_(p, name, p.shape[1] ** -0.5)
        if ".q_proj." in name:
            p.mul_(QUERY_GAIN)


def code_hash() -> str:
    """sha256 of the code that decides the synthetic values (this file and config.py)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in ("weights.py", "config.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]
