"""Baseline candidate: the frozen model's own forward in fp32, eager, with PyTorch's defaults.

The row called `baseline` is this file measured on the machine at hand: every speedup is against it.
"""

from harness import _common as C

_goals = C.load_goals()
_adapter = C.load_adapter(_goals)


def build(model, example_input):
    return (lambda x: _adapter.reference(model, x)), {"dtype": "float32", "compile": "none", "what": "fp32 eager"}


globals()[_goals["build_fn"]] = build  # the name the target's goals.json asks for
