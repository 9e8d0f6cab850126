"""Cheater: decodes once and returns that first output for every later input."""


def build_decoder(vae, example_latent):
    cache = {}

    def forward_fn(z):
        if "out" not in cache:
            cache["out"] = vae.decode(z)
        return cache["out"].clone()

    return forward_fn, {"cheat": "caches the first output"}
