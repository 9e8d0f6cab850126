"""The one file the optimizing agent edits.

Contract (harness/verify.py enforces it):
    build_decoder(vae, example_latent) -> (forward_fn, info)
    - vae: the frozen model from model.load_vae (fp32, on the benchmark device). You may convert
      or copy its weights; the harness keeps its own pristine copy for the reference.
    - example_latent: a latent of the benchmark shape, for shape-specialized setup (compile,
      buffers, CUDA graphs). Never read its values or special-case it.
    - forward_fn(z) must return what vae.decode(z) returns, fp32 [B, 3, 1 + 4 (T - 1), 16 h, 16 w]
      in [-1, 1], for ANY latent of the example's shape; it must not modify z, keep outputs
      between calls, or leave work unsynchronized on a side stream.
    - info: a dict describing the configuration (dtype, compile mode, ...), recorded with the result.

This version: the plain fp32 eager baseline.
"""

import torch


def build_decoder(vae, example_latent):
    def forward_fn(z: torch.Tensor) -> torch.Tensor:
        return vae.decode(z)

    return forward_fn, {"dtype": "float32", "compile": "none", "layout": "NCDHW"}
