"""The toy target's adapter: a tiny conv + MLP with seeded weights (see tests/test_retarget.py).

The same adapter functions as model/target.py; nothing in harness/ changes to use it.
"""

from __future__ import annotations

import hashlib
import math
import os
import time

import torch
from torch import nn


HIDDEN = 16  # the Toy's default width: the channels the MLP works in


class Toy(nn.Module):
    """[B, C, T, H, W] -> same shape in [-1, 1]: a 3D conv, then an MLP over channels.

    5-D like a video, but no video's encoding: its adapter has no input_from_clip, so its input
    is always the seeded one.
    """

    def __init__(self, channels: int = 4, hidden: int = HIDDEN, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay  # seconds slept per call: a cost that candidates can lower, by construction
        self.conv = nn.Conv3d(channels, hidden, 3, padding=1)
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay)
        h = torch.relu(self.conv(x)).permute(0, 2, 3, 4, 1)  # channels last for the MLP
        return torch.tanh(self.mlp(h).permute(0, 4, 1, 2, 3) + x)


def load_model(device: str | torch.device = "cpu") -> Toy:
    torch.manual_seed(0)  # seeded weights: the same model in every process
    # TOY_DELAY_S makes the frozen model slow, so keep/revert tests never hang on CPU noise
    return Toy(delay=float(os.environ.get("TOY_DELAY_S", "0"))).to(device).eval().requires_grad_(False)


def weights_kind() -> str:
    return "synthetic"


def weights_id() -> str:
    """Seeded in load_model: the weights are named by the code that makes them."""
    return "toy-" + hashlib.sha256(open(__file__, "rb").read()).hexdigest()[:16]


def compare(out: torch.Tensor, ref: torch.Tensor, gate: dict) -> dict:
    """A deliberately different gate from the VAE's: the largest absolute difference alone."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        return {"passed": False, "reason": "wrong type, shape or dtype", "quality": None, "max_abs": None}
    if not torch.isfinite(out).all():
        return {"passed": False, "reason": "output has NaN or Inf", "quality": None, "max_abs": None}
    worst = float((out - ref.to(out.dtype)).abs().max())
    ok = worst <= gate["max_abs"]
    return {"passed": ok, "reason": "" if ok else f"max abs diff {worst:.4g} > {gate['max_abs']}",
            "quality": worst, "max_abs": worst}


def make_input(shape: list[int], seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device)


def reference(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x)


def output_shape(shape: list[int]) -> list[int]:
    return list(shape)


def flops(shape: list[int]) -> float:
    """The FLOPs torch's counter gives one call of the default Toy (tests/test_retarget.py checks
    the two agree): per position, the conv's multiply-adds and the two linear layers' (biases are
    not counted). A formula, not a count: the harness asks for it in every process that measures,
    and counting would import torch._dynamo there (a CPU second each)."""
    batch, channels, *volume = shape
    positions = batch * math.prod(volume)
    conv = 27 * channels * HIDDEN  # a 3x3x3 kernel over `channels` inputs, for each of HIDDEN outputs
    mlp = HIDDEN * HIDDEN + HIDDEN * channels
    return 2.0 * positions * (conv + mlp)


def frames(output: torch.Tensor) -> torch.Tensor:
    """Channels 0-2 of the first sample as pictures, [T, 3, H, W] (for the quality strip)."""
    return output[0, :3].transpose(0, 1)
