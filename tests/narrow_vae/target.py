"""The Wan 2.2 VAE's adapter (model/target.py) on a narrow model: the same architecture
(model.WanVAE: every layer, the streaming decode, the middle attention, the head) with the
decoder 32 channels wide at its first stage instead of 256 (the encoder 16 instead of 160), and
seeded synthetic weights drawn the same way as the full model's (model/weights.py).

For the tests whose point does not depend on the channel counts: optimize.py's chunking, history
and fused steps, the drop-in patches, the CLIs around a VAE-shaped target. The full model's
decoder is 2.2 GB of fp32 weights, and optimize.py's CPU path keeps its own copy of every conv
weight beside the frozen model's (about 5 GB in one process); this one is 1/64 of that. Everything
but the model is the real target's: the gate (compare), make_input, reference, output_shape,
frames. The full-width model runs in tests/test_model_parity.py, test_verify.py's calibration and
test_make_assets.py.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from model import LATENT_MEAN, LATENT_STD, WanVAE
from model.target import build_split, compare, frames, make_input, output_shape, reference  # noqa: F401 - the real target's
from model.weights import synthetic_id, synthetic_state_dict

DIMS = {"dim": 16, "dec_dim": 32}


def load_model(device: str | torch.device = "cpu") -> WanVAE:
    """The narrow model in fp32 on `device`, as model.load_vae builds the full one."""
    with torch.device("meta"):
        vae = WanVAE(**DIMS)
    vae.load_state_dict(synthetic_state_dict(vae), strict=True, assign=True)
    vae.latent_mean = torch.tensor(LATENT_MEAN)
    vae.latent_std = torch.tensor(LATENT_STD)
    return vae.to(device).eval().requires_grad_(False)


def weights_kind() -> str:
    return "synthetic"


def weights_id() -> str:
    return f"narrow-{DIMS['dim']}-{DIMS['dec_dim']}-{synthetic_id()}"


def flops(shape: list[int]) -> float:
    with torch.device("meta"):
        model = WanVAE(**DIMS)
        x = torch.empty(*shape)
    counter = FlopCounterMode(display=False)
    with counter:
        model.decode(x)
    return float(counter.get_total_flops())
