"""Calibration: a plain bf16 eager decode (weights and input in bf16, output back to fp32).
Must PASS the gate. Builds its own bf16 copy so the shared test model stays fp32."""

import torch


def build_decoder(vae, example_latent):
    with torch.device("meta"):
        half = type(vae)()
    half.load_state_dict({k: v.to(torch.bfloat16) for k, v in vae.state_dict().items()}, assign=True)
    half.latent_mean, half.latent_std = vae.latent_mean.clone(), vae.latent_std.clone()
    half.eval().requires_grad_(False)
    return (lambda z: half.decode(z.to(torch.bfloat16)).float()), {"dtype": "bfloat16"}
