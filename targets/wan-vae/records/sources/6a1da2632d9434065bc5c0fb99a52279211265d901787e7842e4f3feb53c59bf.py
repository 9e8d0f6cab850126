"""Baseline candidate: the frozen model's eager forward with bf16 weights and floating inputs, the
output cast back to fp32 (every target's reference is fp32). The second denominator that
bench --baseline reports."""

import torch

from harness import _common as C

_goals = C.load_goals()
_adapter = C.load_adapter(_goals)


def build(model, example_input):
    model.to(torch.bfloat16)

    def forward(x):
        return _adapter.reference(model, x.to(torch.bfloat16) if x.is_floating_point() else x).float()

    return forward, {"dtype": "bfloat16", "compile": "none", "what": "bf16 eager"}


globals()[_goals["build_fn"]] = build
