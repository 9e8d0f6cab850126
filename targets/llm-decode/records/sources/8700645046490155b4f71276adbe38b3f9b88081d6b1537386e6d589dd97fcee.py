"""Keeper candidate 1: bf16 weights and a static KV cache, eager.

The cache is allocated once, for the example's P + N tokens, and zeroed at the start of every
call (reset), so no call sees another's keys. A static cache replaces the DynamicCache's
per-step torch.cat of every layer's keys and values (O(length) copies a step) with an in-place
index_copy_, and it is what makes the decode step capturable as a CUDA graph (the next keeper).
"""

import torch
from transformers import StaticCache

from llm.decode import prompt_and_forced, split


def build_decoder(model, example_input):
    model.to(torch.bfloat16)
    _, p, n = split(example_input.shape)
    cache = StaticCache(config=model.config, max_cache_len=p + n)

    @torch.no_grad()
    def forward_fn(x: torch.Tensor) -> torch.Tensor:
        prompt, forced = prompt_and_forced(x)
        cache.reset()
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = [out.logits[:, -1].float()]
        for i in range(forced.shape[1] - 1):
            out = model(input_ids=forced[:, i:i + 1], past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1].float())
        return torch.stack(logits, dim=1)

    return forward_fn, {"dtype": "bfloat16", "cache": "static", "compile": "none"}
