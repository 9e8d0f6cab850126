"""Cheater: returns the reference output read from disk (verify's FileGuard must block the read)."""

import torch

from harness import _common


def build_decoder(vae, example_latent):
    refs = sorted(_common.assets_dir().glob("reference_*.pt"))
    saved = torch.load(refs[0], weights_only=True)["output"]
    return (lambda z: saved.clone().to(z.device)), {"cheat": "reads the reference file"}
