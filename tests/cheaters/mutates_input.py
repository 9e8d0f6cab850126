"""Cheater: decodes correctly, then scribbles on its input (in-place scaling as scratch space)."""


def build_decoder(vae, example_latent):
    def forward_fn(z):
        out = vae.decode(z)
        z.mul_(0.5)
        return out

    return forward_fn, {"cheat": "mutates its input"}
