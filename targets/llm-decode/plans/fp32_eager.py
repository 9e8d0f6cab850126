"""Baseline: the frozen model, fp32, eager, one forward for the prompt and one per generated token
through transformers' DynamicCache, each fed the argmax of the logits before it. It is the
reference generation itself (llm.decode.greedy_logits, what harness/baselines/fp32_eager.py
measures as the baseline row); re-baseline with it.
"""

from llm.decode import greedy_logits


def build_decoder(model, example_input):
    return (lambda x: greedy_logits(model, x)), {"dtype": "float32", "cache": "dynamic", "compile": "none"}
