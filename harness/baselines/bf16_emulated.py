"""bf16 numerics with fp32 kernels, for CPUs without fast bf16 ones.

Where a CPU lacks bf16 instructions (AVX2 only: seen on a 2-core AMD EPYC, where one bf16 conv3d of
the tiny preset took 50-100 s against 0.3 s in fp32), oneDNN falls back to a reference kernel and a
plain bf16 decode takes tens of minutes. The same numbers come from fp32 kernels whose every result
is rounded to bf16, as a bf16 eager run stores it: bf16 kernels accumulate in fp32 too.

    round_parameters(model)          # the weights as bf16 holds them, kept in fp32 tensors
    with RoundedToBf16():
        y = model(x)                 # every new floating result rounded to bf16
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _round_(t: torch.Tensor) -> None:
    t.copy_(t.to(torch.bfloat16))


def round_parameters(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                _round_(p)


class RoundedToBf16(TorchDispatchMode):
    """Rounds the floating output of every op to bf16 values; outputs that share storage with an
    input (views, in-place results of an already rounded tensor) are left alone."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float64) \
                    and t.untyped_storage().data_ptr() not in inputs:
                _round_(t)
        return out
