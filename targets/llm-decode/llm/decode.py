"""The call being measured: a teacher-forced generation of N tokens after a prompt of P tokens.

The input is int64 token ids of shape [B, R, N]: the sequence, laid out in rows of N tokens
(read it as x.reshape(B, -1)). The first R - 1 rows are the prompt (P = (R - 1) * N tokens), the
last row the N tokens "generated". Carrying N as a dimension lets the output shape follow from
the input shape alone, which is all the harness passes to output_shape.

The output is float32 logits [B, N, V]: out[:, i] is the distribution the model gives for
generated token i, exactly as generate(max_new_tokens=N) computes them: one prefill over the
prompt (its last position gives token 0), then N - 1 one-token steps through the KV cache, step i
feeding generated token i - 1. The last generated token is never fed, as in generate. Feeding
the given tokens instead of the argmax (teacher forcing) makes every call's output a fixed
function of its input, so no tiny numerical difference can send a candidate down another path.
"""

from __future__ import annotations

import torch
from torch import nn


def split(shape: list[int] | torch.Size) -> tuple[int, int, int]:
    """(batch, prompt length P, new tokens N) of an input shape [B, R, N]."""
    if len(shape) != 3 or shape[1] < 2 or shape[2] < 1 or shape[0] < 1:
        raise ValueError(f"input shape {list(shape)} is not [B, R >= 2, N >= 1]")
    b, r, n = shape
    return b, (r - 1) * n, n


def prompt_and_forced(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt [B, P] and the generated tokens [B, N] of an input [B, R, N]."""
    b, p, n = split(x.shape)
    tokens = x.reshape(b, p + n)
    return tokens[:, :p], tokens[:, p:]


@torch.no_grad()
def teacher_forced_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The reference: fp32 eager prefill + N - 1 decode steps through a DynamicCache."""
    from transformers import DynamicCache

    prompt, forced = prompt_and_forced(x)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    logits = [out.logits[:, -1].float()]
    for i in range(forced.shape[1] - 1):
        out = model(input_ids=forced[:, i:i + 1], past_key_values=cache, use_cache=True)
        logits.append(out.logits[:, -1].float())
    return torch.stack(logits, dim=1)
