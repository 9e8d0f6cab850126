"""Experiment: deliberately slower (bf16 eager plus a 0.5 s sleep a call), to prove the revert path."""

import time

import torch


def build_decoder(vae, example_latent):
    vae.to(torch.bfloat16)

    def forward_fn(z: torch.Tensor) -> torch.Tensor:
        time.sleep(0.5)
        return vae.decode(z.to(torch.bfloat16))

    return forward_fn, {"dtype": "bfloat16", "compile": "none", "layout": "NCDHW", "sleep_s": 0.5}
