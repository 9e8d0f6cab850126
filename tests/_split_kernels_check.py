"""Run with TRITON_INTERPRET=1 (tests/test_split_decode.py does): a candidate's Winograd convs split
into slabs as integrations/split_decode.py splits them on GPUs (the function named winograd_conv,
wrapped as a conv that zero-pads "same" by one row): the causal 3x3x3 conv, with its history in
front and apart, and where the candidate passes them through that name (winograd_conv(..., phases=True))
the upsampling's phase convs (F(7x7, 2x2)). Each slab's conv, its border rows
made again from the neighbours' rows, must equal its rows of the whole frame's conv, in height and
in width, for slabs of 1 to 4 rows (the thin-slab path and the border windows, one and two a slab).
Prints "cases: N" (3 with the phase convs, else 2), then a line a case and axis.
Usage: python tests/_split_kernels_check.py CANDIDATE.py"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import torch

import _interpreter_patch_once  # noqa: F401  (this file's folder is on sys.path: run as a script)
from harness import target

target.use(Path(__file__).resolve().parent.parent / "targets" / "wan-vae")
from _one_process_halo import OneProcessHalo  # noqa: E402
from integrations.split_decode import HEIGHT, SAME_PADDED_CONVS, WIDTH, Split, _same_padded  # noqa: E402

spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
assert m._INTERPRET and m.triton is not None, "needs TRITON_INTERPRET=1 and triton"
assert "winograd_conv" in SAME_PADDED_CONVS, "the split no longer wraps winograd_conv: this check tests nothing"
g = torch.Generator().manual_seed(5)
CL = torch.channels_last_3d


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g).contiguous(memory_format=CL)


c, t, h, w = 64, 1, 8, 9
x = rand(1, c, t + 2, h, w)  # a causal conv's input buffer: two history frames, then the new ones
history = rand(1, c, 2, h, w)  # the history kept apart, past the first pass
small = rand(1, c, t, h, w)  # the upsampling's input
conv3 = m.winograd_weight(torch.randn(64, c, 3, 3, 3, generator=g) / 40, torch.float32)
cases = {  # name: (the conv's inputs laid out on the frame's rows, its other arguments)
    "causal 3x3x3": ((x,), (*conv3,), {}),
    "causal 3x3x3, history apart": ((x[:, :, 2:].contiguous(memory_format=CL), history), (*conv3,), {}),
}
if "phases" in inspect.signature(m.winograd_conv).parameters:
    phases = m.subpixel_winograd_weight(m._subpixel_weight(torch.randn(c, c, 3, 3, generator=g).double() / 24),
                                        torch.float32)
    cases["phase convs"] = ((small,), (*phases,), {"phases": True})
print(f"cases: {len(cases)}")
for name, (inputs, weights, kwargs) in cases.items():
    whole = m.winograd_conv(inputs[0], *weights, *inputs[1:], **kwargs)
    for axis, sizes in ((HEIGHT, (4, 1, 2, 1)), (WIDTH, (2, 4, 1, 2))):
        err = 0.0
        for rank in range(len(sizes)):
            one = OneProcessHalo(list(inputs), Split(axis, sizes, rank))
            slabs = [a.narrow(axis, one.start, one.n).contiguous(memory_format=CL) for a in inputs]
            got = _same_padded(m.winograd_conv, 1, one.halo)(slabs[0], *weights, *slabs[1:], **kwargs)
            err = max(err, float((got - whole.narrow(axis, one.start, one.n)).abs().max()))
        assert err < 1e-4, f"{name} split in {'height' if axis == HEIGHT else 'width'}: off by {err}"
        print(f"{name}, slabs {sizes} in {'height' if axis == HEIGHT else 'width'}: ok ({err:.1e})")
print("every split matches")
