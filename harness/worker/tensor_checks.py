"""The first and last steps of every target's gate (model/target.py, the LLM's llm/gate.py, the
toy's): the output's type, shape and dtype (also checked by the worker before it copies an output
into the shared buffer), and the verdict from the gate's bounds."""

from __future__ import annotations

from typing import Any


def output_mismatch(out: Any, shape: Any, dtype: Any, what: str = "reference") -> str | None:
    """Why `out` is not a tensor of this shape and dtype, in one line; None when it is."""
    import torch

    if not isinstance(out, torch.Tensor):
        return f"output is {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(shape):
        return f"shape {tuple(out.shape)} != {what} {tuple(shape)}"
    if out.dtype != dtype:
        return f"dtype {out.dtype} != {what} {dtype}"
    return None


def gate_verdict(facts: dict[str, Any], bounds: list[tuple[bool, str]]) -> dict[str, Any]:
    """A gate's last step: facts with the reason of the first bound broken (bounds: (broken,
    reason) in the gate's order), or passed when none is."""
    for broken, reason in bounds:
        if broken:
            facts["reason"] = reason
            return facts
    facts["passed"] = True
    return facts
