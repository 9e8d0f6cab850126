"""Development probe (one CUDA GPU): optimize.py's row kernels (the sub-pixel merge, the residual sum,
norm + SiLU) at the 720p decode's shapes, their time and the bandwidth it implies, for one or more
candidate files side by side.

    python scripts/probe_row_kernels.py targets/wan-vae/optimize.py [VARIANT.py ...]

Each kernel reads and writes whole activations once (bytes: what it must move, not what the cache
sees), so its GB/s against the GPU's bandwidth says whether it waits on memory or on its own
arithmetic. The shapes are one call's of the full preset: a pass of 3 latent frames up to the last
upsampling, then pieces of 4 video frames (FRAMES_PER_PIECE); each with the norm of the conv that
reads it. Every candidate is timed on the same tensors, in turn, trial after trial (CUDA events;
median of 7 trials of 10 back-to-back calls).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
from _probe import load_module, median_ms

CL = torch.channels_last_3d
DT = torch.bfloat16


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=DT).contiguous(memory_format=CL)


def cases(c_up: list[tuple[str, int, int, int, int, int, int]]):
    """(label, bytes moved, function of a module) for every kernel and shape."""
    out = []
    # subpixel merge: o [1, 4 C, t, h, w] (phases on the small grid), src [1, C_SRC, t / FT, h, w] -> [1, C, t, 2h, 2w]
    # and its normalized copy: reads o and src, writes the sum and the copy.
    for label, c, c_src, t, h, w, ft in c_up:
        o, src = rand(1, 4 * c, t, h, w), rand(1, c_src, t // ft, h, w)
        bias, gamma = torch.randn(c, device="cuda"), torch.rand(c, device="cuda") + 0.5
        dest = torch.empty(1, c, t, 2 * h, 2 * w, device="cuda", dtype=DT).contiguous(memory_format=CL)
        moved = (o.numel() + src.numel() + 2 * dest.numel()) * 2
        out.append((f"subpixel_merge {label}", moved,
                    lambda m, o=o, bias=bias, src=src, ft=ft, gamma=gamma, dest=dest:
                    m.subpixel_merge(o, bias, src, ft, False, (gamma, dest))))
    # residual sum + the next conv's normalized input: reads two, writes two.
    for label, c, t, h, w in (("stage 1 1024 @ 88x160 x 12", 1024, 12, 88, 160),
                              ("stage 2 512 @ 176x320 x 12", 512, 12, 176, 320),
                              ("stage 3 256 @ 352x640 x 4", 256, 4, 352, 640)):
        a, s = rand(1, c, t, h, w), rand(1, c, t, h, w)
        bias, gamma = torch.randn(c, device="cuda"), torch.rand(c, device="cuda") + 0.5
        dest = torch.empty_like(a, memory_format=CL)
        out.append((f"residual_sum {label}", 4 * a.numel() * 2,
                    lambda m, a=a, bias=bias, s=s, gamma=gamma, dest=dest: m.residual_sum(a, bias, s, (gamma, dest))))
        x = rand(1, c, t, h, w)
        y = torch.empty_like(x, memory_format=CL)
        out.append((f"norm_silu {label}", 2 * x.numel() * 2,
                    lambda m, x=x, bias=bias, gamma=gamma, y=y: m.norm_silu(x, gamma, bias, y)))
    return out


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [Path("targets/wan-vae/optimize.py")]
    mods = [load_module(p, name=f"candidate{i}") for i, p in enumerate(paths)]
    print(torch.cuda.get_device_name(), torch.__version__, "| candidates:", ", ".join(map(str, paths)))
    # (label, C, C_SRC, frames out, h, w, FT): the decoder's three upsamplings, a pass / a piece each
    ups = [("up0 1024 -> 88x160 x 6", 1024, 1024, 6, 44, 80, 2),
           ("up1 1024 -> 176x320 x 12", 1024, 1024, 12, 88, 160, 2),
           ("up2 512 -> 352x640 x 4", 512, 1024, 4, 176, 320, 1)]
    for label, moved, fn in cases(ups):
        for m in mods:  # compile and warm up
            fn(m)
        times: list[list[float]] = [[] for _ in mods]
        for _ in range(7):  # a trial of each candidate in turn
            for k, m in enumerate(mods):
                times[k].append(median_ms(lambda m=m: fn(m), trials=1, reps=10, warmup=0))
        medians = [statistics.median(t) for t in times]
        cols = "  ".join(f"{ms:7.3f} ms {moved / ms / 1e6:6.0f} GB/s" for ms in medians)
        print(f"{label:38s} {moved / 1e9:6.2f} GB  {cols}")


if __name__ == "__main__":
    main()
