"""The call being measured: greedy generation of N tokens after a prompt of P tokens.

The input is int64 token ids of shape [B, R, N]: the prompt, laid out in R rows of N tokens
(P = R * N; read it as x.reshape(B, P)). Carrying N as a dimension lets the output shape follow
from the input shape alone, which is all the harness passes to output_shape.

The output is float32 logits [B, N, V], what generate(do_sample=False, max_new_tokens=N)
computes: one prefill over the prompt gives out[:, 0], then N - 1 one-token decode steps
through a KV cache, step i feeding the greedy token of position i - 1, argmax(out[:, i - 1])
(ties to the lowest index, torch.argmax's rule). The last position's token is never fed.

The token path is a function of the output itself (path_of), so nothing but the logits crosses
the boundary: the harness checks each call against the frozen fp32 model's logits along the
call's own path (logits_along, the adapter's reference_for_output). A candidate whose rounding
flips a near tie goes down another path and is judged on that path; one that feeds anything but
the argmax of what it returns (teacher forcing on guessed tokens, all N positions from one
parallel forward) is compared with logits that follow other tokens than its own, and fails.
"""

from __future__ import annotations

import torch
from torch import nn


def split(shape: list[int] | torch.Size) -> tuple[int, int, int]:
    """(batch, prompt length P, new tokens N) of an input shape [B, R, N]."""
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"input shape {list(shape)} is not [B, R, N], all >= 1")
    b, r, n = shape
    return b, r * n, n


def prompt_of(x: torch.Tensor) -> torch.Tensor:
    """The prompt [B, P] of an input [B, R, N]."""
    b, p, _ = split(x.shape)
    return x.reshape(b, p)


def greedy_token(logits: torch.Tensor) -> torch.Tensor:
    """The token to feed next [B, 1] from one position's logits [B, V]: the argmax, lowest index on ties."""
    return logits.argmax(-1, keepdim=True)


def path_of(out: torch.Tensor) -> torch.Tensor:
    """The tokens a call fed [B, N - 1], read from its output [B, N, V]: the argmax of every
    position but the last."""
    return out[:, :-1].argmax(-1)


@torch.no_grad()
def greedy_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Prefill + N - 1 greedy decode steps through a DynamicCache, in the model's own dtype; the
    logits come back as float32 and each step's token is the argmax of the float32 logits.
    On the frozen fp32 model this is the reference generation and the baseline."""
    from transformers import DynamicCache

    _, _, n = split(x.shape)
    cache = DynamicCache(config=model.config)
    logits = model(input_ids=prompt_of(x), past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].float()
    rows = [logits]
    for _ in range(n - 1):
        logits = model(input_ids=greedy_token(logits), past_key_values=cache, use_cache=True).logits[:, -1].float()
        rows.append(logits)
    return torch.stack(rows, dim=1)


@torch.no_grad()
def logits_along(model: nn.Module, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The model's float32 logits [B, N, V] along the token path of `out`: one causal forward over
    the prompt and path_of(out) (P + N - 1 tokens), keeping the last N positions. The same
    numbers as prefill + N - 1 cached steps fed that path, up to fp32 rounding; the checker may
    compute them in parallel because the path is given (a candidate must find it, step by step)."""
    _, _, n = split(x.shape)
    tokens = torch.cat([prompt_of(x), path_of(out).to(x.device)], dim=1)
    return model(input_ids=tokens, use_cache=False, logits_to_keep=n).logits.float()
