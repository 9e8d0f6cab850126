"""Experiment: the frozen model's eager decode with bf16 weights and input (no other change)."""

import torch


def build_decoder(vae, example_latent):
    vae.to(torch.bfloat16)

    def forward_fn(z: torch.Tensor) -> torch.Tensor:
        return vae.decode(z.to(torch.bfloat16))

    return forward_fn, {"dtype": "bfloat16", "compile": "none", "layout": "NCDHW"}
