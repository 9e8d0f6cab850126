"""Calibration: a plain bf16 eager decode (weights and input in bf16, output back to fp32).
Must PASS the gate.

The frozen model's own modules run with their weights in bf16: each layer's weights are cast just
before it runs and its fp32 ones put back right after, so the shared model stays fp32 and the
worker never holds a second copy of the model (a bf16 copy of the full one would be 1.4 GB more,
beside the 2.8 GB of fp32 weights it is made from). The arithmetic is that of a bf16 copy of the
model: the same ops on the same bf16 weights and bf16 activations."""

import torch


def _to_bf16(module, args):
    module._fp32_params = dict(module._parameters)
    for name, p in module._fp32_params.items():
        if p is not None:
            module._parameters[name] = p.to(torch.bfloat16)


def _back_to_fp32(module, args, out):
    module._parameters.update(module.__dict__.pop("_fp32_params"))


def build_decoder(vae, example_latent):
    layers = [m for m in vae.modules() if any(p is not None for p in m._parameters.values())]

    def forward_fn(z):
        handles = [h for m in layers for h in (m.register_forward_pre_hook(_to_bf16),
                                                 m.register_forward_hook(_back_to_fp32))]
        try:
            return vae.decode(z.to(torch.bfloat16)).float()
        finally:
            for h in handles:
                h.remove()
            for m in layers:  # a call that raised midway leaves no bf16 weights behind
                if "_fp32_params" in m.__dict__:
                    m._parameters.update(m.__dict__.pop("_fp32_params"))

    return forward_fn, {"dtype": "bfloat16"}
