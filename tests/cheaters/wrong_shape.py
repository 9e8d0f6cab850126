"""Cheater: drops the last frame of the video."""


def build_decoder(vae, example_latent):
    return (lambda z: vae.decode(z)[:, :, :-1]), {"cheat": "wrong shape"}
