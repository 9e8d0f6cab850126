"""Where the VAE's weights come from: the published checkpoint, or deterministic synthetic ones.

Latency does not depend on the weights' values; quality figures do, so every record names the
weights kind (`weights_kind`).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parent.parent
CHECKPOINT = REPO / "assets" / "Wan2.2_VAE.pth"
HF_REPO, HF_FILE = "Wan-AI/Wan2.2-TI2V-5B", "Wan2.2_VAE.pth"
SYNTHETIC_SEED = 20250728


def synthetic_id() -> str:
    """Names the synthetic weights: the seed and the code that draws them (this file)."""
    return f"synthetic-{SYNTHETIC_SEED}-{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}"


def synthetic_cache() -> Path:
    """Drawing 2.8 GB of seeded weights takes ~17 s on two CPU cores; loading this file (memory
    mapped, so processes share the pages) takes well under one."""
    return REPO / "assets" / f"{synthetic_id()}.pt"


def synthetic_state_dict(model: nn.Module, seed: int = SYNTHETIC_SEED) -> dict[str, torch.Tensor]:
    """Seeded weights for every key of `model`, the same on every machine and torch version.

    Convolutions get uniform(+-1/sqrt(fan_in)) like PyTorch's default init, biases a small
    spread, norm gains 1 +- 0.1. Only torch's CPU generator is used, keyed per tensor name.
    """
    out = {}
    for name, ref in model.state_dict().items():
        g = torch.Generator().manual_seed(seed + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
        u = torch.rand(ref.shape, generator=g, dtype=torch.float32) * 2 - 1
        if name.endswith("gamma"):
            out[name] = 1 + 0.1 * u
        elif name.endswith("bias"):
            out[name] = 0.02 * u
        else:
            fan_in = math.prod(ref.shape[1:])
            out[name] = u / math.sqrt(fan_in)
    return out


def download_checkpoint() -> Path:
    """Fetch the published checkpoint into assets/ (needs the network and huggingface_hub)."""
    from huggingface_hub import hf_hub_download

    CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
    return Path(hf_hub_download(HF_REPO, HF_FILE, local_dir=CHECKPOINT.parent))


def state_dict_sha256(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()
