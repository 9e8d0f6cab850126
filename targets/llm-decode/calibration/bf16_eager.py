"""Calibration (must PASS): the reference's own eager greedy loop with the model and its cache in bf16.

The plainest reduced-precision decode; the gate must admit it. Its path may leave the fp32
model's after an argmax that bf16 rounding flips (a near tie): it is then judged along its own
path. The candidate owns the model it is given (the worker's own copy), so converting it in place
is allowed.
"""

import torch

from llm.decode import greedy_logits


def build_decoder(model, example_input):
    model.to(torch.bfloat16)
    return (lambda x: greedy_logits(model, x)), {"dtype": "bfloat16", "cache": "dynamic", "compile": "none"}
