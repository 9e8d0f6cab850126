"""Calibration (must FAIL): the middle decoder layer skipped (its input passed through).

The layer still runs and fills its KV cache; only its output is dropped, during calls only.
"""

import torch
from transformers import DynamicCache

from llm.decode import prompt_and_forced


def _identity(module, args, kwargs, output):
    hidden = args[0] if args else kwargs["hidden_states"]
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


def build_decoder(model, example_input):
    layer = model.model.layers[len(model.model.layers) // 2]

    @torch.no_grad()
    def forward_fn(x: torch.Tensor) -> torch.Tensor:
        handle = layer.register_forward_hook(_identity, with_kwargs=True)
        try:
            prompt, forced = prompt_and_forced(x)
            cache = DynamicCache(config=model.config)
            out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            logits = [out.logits[:, -1].float()]
            for i in range(forced.shape[1] - 1):
                out = model(input_ids=forced[:, i:i + 1], past_key_values=cache, use_cache=True)
                logits.append(out.logits[:, -1].float())
            return torch.stack(logits, dim=1)
        finally:
            handle.remove()

    return forward_fn, {"skip": f"model.layers[{len(model.model.layers) // 2}]"}
