"""Baseline candidate: the frozen model's own forward in fp32, eager, with PyTorch's defaults.

The row called `baseline` is this file measured on the machine at hand: every speedup is against it.
"""

from harness import _common

_goals = _common.load_goals()
_adapter = _common.load_adapter(_goals)


def build(model, example_input):
    return (lambda x: _adapter.reference(model, x)), {"dtype": "float32", "compile": "none", "what": "fp32 eager"}


build.on_one_rank = True  # a preset of several ranks: the whole call on rank 0, the others idle (worker_group.build)
globals()[_goals["build_fn"]] = build  # the name the target's goals.json asks for
