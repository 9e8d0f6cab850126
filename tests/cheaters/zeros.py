"""Cheater: returns zeros of the right shape."""

import torch


def build_decoder(vae, example_latent):
    def forward_fn(z):
        b, _, t, h, w = z.shape
        return torch.zeros(b, 3, 1 + 4 * (t - 1), 16 * h, 16 * w, device=z.device)

    return forward_fn, {"cheat": "zeros"}
