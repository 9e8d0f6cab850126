"""The equivalence gate: a candidate's logits against the fp32 reference's, position by position.

Headline: the largest KL divergence KL(p_ref || p_out) over the generated positions, in nats,
the figure llama.cpp's --kl-divergence uses to judge reduced-precision models. A KL bound is
meaningful whatever the top-2 margin is, where comparing greedy tokens is not: with a near tie
any rounding flips the argmax. A bound on the largest absolute logit difference sits beside it,
because KL weighs each logit by its probability and would let a corrupted block of unlikely
logits through. Top-1 agreement is reported, not gated (near ties again).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.worker.tensor_checks import gate_verdict, output_mismatch

# Rows of [positions, vocab] converted to fp64 at once: ~64 MB at Qwen's 151936 tokens.
_CHUNK_ELEMENTS = 1 << 23


def _facts(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """max / mean KL, max abs logit difference and top-1 agreement, chunked in fp64."""
    vocab = ref.shape[-1]
    out2, ref2 = out.detach().reshape(-1, vocab), ref.detach().reshape(-1, vocab)
    rows = max(1, _CHUNK_ELEMENTS // vocab)
    max_kl, sum_kl, max_abs, agree = 0.0, 0.0, 0.0, 0
    for start in range(0, out2.shape[0], rows):
        o = out2[start:start + rows].to(torch.float64)
        r = ref2[start:start + rows].to(o.device, torch.float64)
        lp_ref, lp_out = r.log_softmax(-1), o.log_softmax(-1)
        kl = (lp_ref.exp() * (lp_ref - lp_out)).sum(-1).clamp_min(0)  # rounding can give -1e-17
        max_kl = max(max_kl, float(kl.max()))
        sum_kl += float(kl.sum())
        max_abs = max(max_abs, float((o - r).abs().max()))
        agree += int((o.argmax(-1) == r.argmax(-1)).sum())
    n = out2.shape[0]
    return {"max_kl": max_kl, "mean_kl": sum_kl / n, "max_abs": max_abs, "top1_agree": agree / n}


def compare(out: Any, ref: torch.Tensor, gate: dict[str, Any]) -> dict[str, Any]:
    """The verdict on one output: passed, reason ("" when passed), quality (= max KL), max_abs."""
    res: dict[str, Any] = {"passed": False, "reason": "", "quality": None, "max_abs": None,
                           "max_kl": None, "mean_kl": None, "top1_agree": None}
    res["reason"] = output_mismatch(out, ref.shape, ref.dtype) or ""
    if res["reason"]:
        return res
    if not bool(torch.isfinite(out).all()):
        res["reason"] = "output has NaN or Inf"
        return res
    facts = _facts(out, ref)
    res.update(facts, quality=facts["max_kl"])
    return gate_verdict(res, [
        (facts["max_kl"] > gate["max_kl"], f"max KL {facts['max_kl']:.3g} nats > {gate['max_kl']}"),
        (facts["max_abs"] > gate["max_abs_logit"], f"max abs logit diff {facts['max_abs']:.4g} > {gate['max_abs_logit']}")])
