"""The first checks on any output, shared by every target's gate (model/target.py, the LLM's
llm/gate.py, the toy's) and by the worker before it copies an output into the shared buffer."""

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
