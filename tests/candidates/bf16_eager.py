"""Calibration: a plain bf16 eager decode (weights and activations in bf16, output back to fp32).
Must PASS the gate.

On a GPU the frozen model's own modules run with their weights in bf16: each layer's weights are
cast just before it runs and its fp32 ones put back right after, so the shared model stays fp32
and the worker never holds a second copy of the model. On a CPU the same numbers come from fp32
kernels whose every result is rounded to bf16 (harness/baselines/bf16_emulated.py): a CPU without
bf16 instructions takes over a minute for one bf16 conv of the tiny preset."""

import torch

from harness.baselines.bf16_emulated import RoundedToBf16, round_parameters


def _to_bf16(module, args):
    module._fp32_params = dict(module._parameters)
    for name, p in module._fp32_params.items():
        if p is not None:
            module._parameters[name] = p.to(torch.bfloat16)


def _back_to_fp32(module, args, out):
    module._parameters.update(module.__dict__.pop("_fp32_params"))


def build_decoder(vae, example_latent):
    if example_latent.device.type == "cpu":
        round_parameters(vae)

        def emulated(z):
            with RoundedToBf16():
                return vae.decode(z)

        return emulated, {"dtype": "bfloat16 (emulated)"}
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
