"""The adapter between the generic harness and this target (named by goals.json "adapter").

The harness knows nothing about VAEs: it loads the model, makes inputs, runs the reference and
counts FLOPs through these functions. Retarget the harness by writing another module with
the same functions and pointing goals.json at it. `frames` is optional: without it run_experiment
draws no quality strip.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from . import load_vae, weights_kind as _weights_kind
from .vae import WanVAE
from .weights import state_dict_sha256


def load_model(device: str | torch.device = "cpu") -> WanVAE:
    """The frozen model in fp32 on `device` (weights as load_vae picks them)."""
    return load_vae(device=device)


def weights_kind() -> str:
    return _weights_kind()


def weights_sha256(model: WanVAE) -> str:
    return state_dict_sha256(model.state_dict())


def make_input(shape: list[int], seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """A seeded normalized latent: standard normal, as the diffusion model emits."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device)


def reference(model: WanVAE, x: torch.Tensor) -> torch.Tensor:
    """The frozen forward pass that candidates must reproduce."""
    return model.decode(x)


def output_shape(shape: list[int]) -> list[int]:
    b, _, t, h, w = shape
    return [b, 3, 1 + 4 * (t - 1), 16 * h, 16 * w]


def flops(shape: list[int]) -> float:
    """FLOPs of one reference pass (counted on the meta device, so it costs no compute)."""
    with torch.device("meta"):
        model = WanVAE()
        x = torch.empty(*shape)
    counter = FlopCounterMode(display=False)
    with counter:
        model.decode(x)
    return float(counter.get_total_flops())


def frames(output: torch.Tensor) -> torch.Tensor:
    """The output as pictures, [N, 3, H, W] in [-1, 1]: the frames of the first video."""
    return output[0].transpose(0, 1)
