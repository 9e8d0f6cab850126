"""Calibration (must PASS): optimize.py's eager loop with the model and its cache in bf16.

The plainest reduced-precision decode; the gate must admit it. The candidate owns the model it
is given (the worker's own copy), so converting it in place is allowed.
"""

import torch
from transformers import DynamicCache

from llm.decode import prompt_and_forced


def build_decoder(model, example_input):
    model.to(torch.bfloat16)

    @torch.no_grad()
    def forward_fn(x: torch.Tensor) -> torch.Tensor:
        prompt, forced = prompt_and_forced(x)
        cache = DynamicCache(config=model.config)
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = [out.logits[:, -1].float()]
        for i in range(forced.shape[1] - 1):
            out = model(input_ids=forced[:, i:i + 1], past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1].float())
        return torch.stack(logits, dim=1)

    return forward_fn, {"dtype": "bfloat16", "cache": "dynamic", "compile": "none"}
