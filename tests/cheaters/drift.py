"""Cheater: a correct decode plus noise of 0.05 std (about 32 dB), beyond the gate."""

import torch


def build_decoder(vae, example_latent):
    def forward_fn(z):
        out = vae.decode(z)
        return out + 0.05 * torch.randn_like(out)

    return forward_fn, {"cheat": "drifts beyond tolerance"}
