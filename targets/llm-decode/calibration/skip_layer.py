"""Calibration (must FAIL): the middle decoder layer skipped (its input passed through).

The layer still runs and fills its KV cache; only its output is dropped, during calls only.
"""

from llm.decode import greedy_logits


def skip(module, args, kwargs, output):
    """A forward hook that drops a decoder layer's output (calibrate.py --scan-layers uses it too)."""
    hidden = args[0] if args else kwargs["hidden_states"]
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


def build_decoder(model, example_input):
    layer = model.model.layers[len(model.model.layers) // 2]

    def forward_fn(x):
        handle = layer.register_forward_hook(skip, with_kwargs=True)
        try:
            return greedy_logits(model, x)
        finally:
            handle.remove()

    return forward_fn, {"skip": f"model.layers[{len(model.model.layers) // 2}]"}
