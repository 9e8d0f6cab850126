"""CPU keeper: the same fp32 greedy decode, as a lean loop straight over the weights.

One prefill, then one forward step per generated token through a KV cache, fed the argmax of the
logits it returns: the baseline's computation, without transformers' per-step machinery (module
calls, mask building, cache bookkeeping, a torch.cat of every layer's keys and values a step).
The weights are read once at build time: q/k/v and gate/up each become one matrix (one matmul
instead of two or three, the same dot products), the attention scale is folded into q (a power
of two: exact), the RoPE of each position (cos/sin from the model's own rotary module) is one
d x d matrix for the step, and the KV cache is allocated once, for the example's P + N
positions. Still fp32 eager: the numbers differ from the baseline's only by rounding order.
On a small model the step is a few dozen tiny ops, where a second thread costs more in
synchronization than it gives: such a model runs on one thread (SINGLE_THREAD_BELOW).
"""

import torch
import torch.nn.functional as F

from llm.decode import greedy_token, prompt_of, split

SINGLE_THREAD_BELOW = 512  # hidden size under which one thread is faster on a CPU


def build_decoder(model, example_input):
    cfg = model.config
    b, p, n = split(example_input.shape)
    device = next(model.parameters()).device
    if device.type == "cpu" and cfg.hidden_size < SINGLE_THREAD_BELOW:
        torch.set_num_threads(1)
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = cfg.hidden_size // heads  # head size
    inter, eps = cfg.intermediate_size, cfg.rms_norm_eps
    scale = d ** -0.5  # a power of two for Qwen2's head sizes (64, and 16 here): folding it into q is exact
    layers = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        layers.append((
            layer.input_layernorm.weight,
            torch.cat([a.q_proj.weight * scale, a.k_proj.weight, a.v_proj.weight]).t().contiguous(),
            torch.cat([a.q_proj.bias * scale, a.k_proj.bias, a.v_proj.bias]),
            a.o_proj.weight.t().contiguous(),
            layer.post_attention_layernorm.weight,
            torch.cat([m.gate_proj.weight, m.up_proj.weight]).t().contiguous(),
            m.down_proj.weight.t().contiguous(),
        ))
    embed, norm, head = model.model.embed_tokens.weight, model.model.norm.weight, model.lm_head.weight.t()
    positions = torch.arange(p + n, device=device).unsqueeze(0)
    cos, sin = (t[0] for t in model.model.rotary_emb(embed[:1].unsqueeze(0), positions))  # [P + N, d] each
    # RoPE at one position as a d x d matrix: x * cos + rotate_half(x) * sin = x @ rot[pos]
    half = d // 2
    turn = torch.zeros(d, d, device=device)  # x @ turn = rotate_half(x) = cat(-x[half:], x[:half])
    turn[torch.arange(half) + half, torch.arange(half)] = -1
    turn[torch.arange(half), torch.arange(half) + half] = 1
    rot = torch.diag_embed(cos) + turn * sin[:, None, :]
    # The cache, one tensor a layer: keys stored transposed ([b, kv, d, P + N]) for the step's q @ k.
    keys = [torch.zeros(b, kv, d, p + n, device=device) for _ in layers]
    values = [torch.zeros(b, kv, p + n, d, device=device) for _ in layers]

    def rms(h, w):
        return F.rms_norm(h, (h.shape[-1],), w, eps)

    def prefill(tokens):
        """The prompt [b, P] in one pass: the cache's first P positions, the last position's logits."""
        h = F.embedding(tokens, embed)  # [b, P, hidden]
        c, s = cos[:p], sin[:p]
        for (ln1, w_qkv, b_qkv, w_o, ln2, w_gu, w_down), k_cache, v_cache in zip(layers, keys, values):
            qkv = (rms(h, ln1) @ w_qkv + b_qkv).view(b, p, heads + 2 * kv, d).transpose(1, 2)
            qk = qkv[:, :heads + kv]
            qk = qk * c + torch.cat([-qk[..., half:], qk[..., :half]], dim=-1) * s  # RoPE
            k_cache[..., :p] = qk[:, heads:].transpose(-1, -2)
            v_cache[:, :, :p] = qkv[:, heads + kv:]
            o = F.scaled_dot_product_attention(qk[:, :heads], qk[:, heads:], qkv[:, heads + kv:], is_causal=True,
                                               scale=1.0, enable_gqa=True)
            h = h + o.transpose(1, 2).reshape(b, p, -1) @ w_o
            gu = rms(h, ln2) @ w_gu
            h = h + (F.silu(gu[..., :inter]) * gu[..., inter:]) @ w_down
        return rms(h[:, -1], norm) @ head

    def step(token, pos):
        """One token [b, 1] at position pos: its keys and values into the cache, its logits [b, V]."""
        h = F.embedding(token[:, 0], embed)  # [b, hidden]
        r = rot[pos]
        for (ln1, w_qkv, b_qkv, w_o, ln2, w_gu, w_down), k_cache, v_cache in zip(layers, keys, values):
            qkv = torch.addmm(b_qkv, rms(h, ln1), w_qkv).view(b, heads + 2 * kv, d)
            qk = qkv[:, :heads + kv] @ r
            k_cache[..., pos] = qk[:, heads:]
            v_cache[:, :, pos] = qkv[:, heads + kv:]
            att = (qk[:, :heads].view(b, kv, heads // kv, d) @ k_cache[..., :pos + 1]).softmax(-1)
            h = torch.addmm(h, (att @ v_cache[:, :, :pos + 1]).view(b, -1), w_o)
            gate, up = (rms(h, ln2) @ w_gu).split(inter, dim=-1)
            h = torch.addmm(h, F.silu(gate).mul_(up), w_down)
        return rms(h, norm) @ head

    @torch.no_grad()
    def forward_fn(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(b, n, cfg.vocab_size, dtype=torch.float32, device=x.device)
        out[:, 0] = prefill(prompt_of(x))  # the cache's stale tail is never read: a step attends to :pos + 1
        for i in range(n - 1):
            out[:, i + 1] = step(greedy_token(out[:, i]), p + i)
        return out

    return forward_fn, {"dtype": "float32", "cache": "preallocated", "loop": "lean, over the weights",
                        "threads": torch.get_num_threads()}
