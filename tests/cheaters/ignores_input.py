"""Cheater: decodes the example latent it was built with, whatever it is called with."""


def build_decoder(vae, example_latent):
    fixed = example_latent.clone()
    return (lambda z: vae.decode(fixed)), {"cheat": "ignores its input"}
