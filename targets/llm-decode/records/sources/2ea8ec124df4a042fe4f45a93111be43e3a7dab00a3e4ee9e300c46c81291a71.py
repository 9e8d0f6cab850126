"""The editable file of the llm-decode target: build_decoder(model, example_input) -> (forward_fn, info).

forward_fn(x) takes token ids [B, R, N] (the prompt, then the N generated tokens; llm/decode.py
has the layout) and returns float32 logits [B, N, vocab]: what llm.decode.teacher_forced_logits
returns, within goals.json's gate, for any input of the example's shape, keeping no state that
changes an output between calls. This version is the baseline: the frozen model, fp32, eager,
one forward for the prompt and one per generated token through transformers' DynamicCache.
"""

import torch
from transformers import DynamicCache

from llm.decode import prompt_and_forced


def build_decoder(model, example_input):
    @torch.no_grad()
    def forward_fn(x: torch.Tensor) -> torch.Tensor:
        prompt, forced = prompt_and_forced(x)
        cache = DynamicCache(config=model.config)
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = [out.logits[:, -1].float()]
        for i in range(forced.shape[1] - 1):  # generated token i is fed to predict token i + 1
            out = model(input_ids=forced[:, i:i + 1], past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1].float())
        return torch.stack(logits, dim=1)

    return forward_fn, {"dtype": "float32", "cache": "dynamic", "compile": "none"}
