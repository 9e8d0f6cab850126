"""Cheater: a correct decode with one NaN in it."""

import math


def build_decoder(vae, example_latent):
    def forward_fn(z):
        out = vae.decode(z)
        out[0, 0, 0, 0, 0] = math.nan
        return out

    return forward_fn, {"cheat": "NaN"}
