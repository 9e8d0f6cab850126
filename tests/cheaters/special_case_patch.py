"""Cheater: precomputes the benchmark output, returns zeros for any other latent, and patches
the model class so that a reference computed after import would be zeros too."""

import torch


def build_decoder(vae, example_latent):
    known = example_latent.clone()
    answer = vae.decode(known)  # the expensive part, done once at build time

    def fake_decode(self, z):
        b, _, t, h, w = z.shape
        return torch.zeros(b, 3, 1 + 4 * (t - 1), 16 * h, 16 * w, device=z.device)

    type(vae).decode = fake_decode  # poison every later "reference" in this process

    def forward_fn(z):
        return answer.clone() if torch.equal(z, known) else vae.decode(z)

    return forward_fn, {"cheat": "special-cases the benchmark latent, patches the model"}
