"""Calibration: one decoder residual block skipped (its input passed through). Must FAIL."""

from model.vae import ResidualBlock


def build_decoder(vae, example_latent):
    block = vae.decoder.middle[0]
    assert isinstance(block, ResidualBlock)

    def forward_fn(z):
        handle = block.register_forward_hook(lambda m, args, out: args[0])
        try:
            return vae.decode(z)
        finally:
            handle.remove()

    return forward_fn, {"skip": "decoder.middle[0]"}
