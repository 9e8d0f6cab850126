"""Baseline candidate: the frozen model's eager forward with bf16 weights and floating inputs, the
output cast back to fp32 (every target's reference is fp32). The second denominator that
bench --baseline reports. On a CPU, bf16 numerics with fp32 kernels (harness/baselines/bf16_emulated.py):
a CPU without bf16 instructions takes minutes for what fp32 does in a second."""

import torch

from harness import _common
from harness.baselines.bf16_emulated import RoundedToBf16, round_parameters

_goals = _common.load_goals()
_adapter = _common.load_adapter(_goals)


def build(model, example_input):
    if example_input.device.type == "cpu":
        round_parameters(model)

        def emulated(x):
            with RoundedToBf16():
                return _adapter.reference(model, x).float()

        return emulated, {"dtype": "bfloat16 (emulated: fp32 kernels, every result rounded to bf16)",
                          "compile": "none", "what": "bf16 eager"}
    model.to(torch.bfloat16)

    def forward(x):
        return _adapter.reference(model, x.to(torch.bfloat16) if x.is_floating_point() else x).float()

    return forward, {"dtype": "bfloat16", "compile": "none", "what": "bf16 eager"}


build.on_one_rank = True  # a preset of several ranks: the whole call on rank 0, the others idle (worker_group.build)
globals()[_goals["build_fn"]] = build
