"""Development probe (not part of the frozen harness): what a residual conv's epilogue costs when
the Winograd output transform runs it (optimize.py's Epilogue) against the conv followed by the
separate kernels (apply_epilogue), for each wide conv shape of a full-preset decode.

    python scripts/probe_epilogue.py [--candidate optimize.py] [--blocks P,C,WARPS ...] [--out FILE.md]

Two epilogues a residual block: conv 1's (+ bias, normalized into conv 2's input, not kept) and
conv 2's (+ bias + shortcut, kept, normalized into the next block's input). --blocks: output
transform blocks (tiles, channels, warps a program) to try for the fused form, besides the
candidate's own. The decode-wide sums weigh each shape by its calls a decode.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _probe import load_module, median_ms
from probe_winograd import SHAPES, operands

ROOT = Path(__file__).resolve().parent.parent
CL = torch.channels_last_3d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidate", type=Path, default=ROOT / "optimize.py")
    ap.add_argument("--blocks", nargs="*", default=[], help="output transform blocks P,C,WARPS to try")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    m = load_module(args.candidate)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    blocks = [m.WINOGRAD_BLOCKS["output"]] + [tuple(int(x) for x in b.split(",")) for b in args.blocks]
    head = "| C -> Co, frames, HxW | calls | epilogue | unfused ms | " + " | ".join(f"fused {b} ms" for b in blocks) + " |"
    lines = [f"# Epilogue probe ({torch.cuda.get_device_name()}, torch {torch.__version__})", "", head,
             "|" + "---|" * (4 + len(blocks))]
    totals = [0.0] * (1 + len(blocks))
    for c, co, t, h, w, calls in SHAPES:
        buf, wt = operands(c, co, t, h, w, dev, torch.bfloat16)
        u, inv_scale = m.winograd_weight(wt, torch.float16)
        bias, gamma = torch.randn(co, device=dev), torch.rand(co, device=dev) + 0.5
        skip = torch.randn(1, co, t, h, w, device=dev, dtype=torch.bfloat16).contiguous(memory_format=CL)
        dest = torch.empty(1, co, t + 2, h, w, device=dev, dtype=torch.bfloat16, memory_format=CL)
        for label, then in (("conv 1: bias, normed", m.Epilogue(bias, None, (gamma, dest[:, :, 2:]), keep=False)),
                            ("conv 2: residual, kept + normed", m.Epilogue(bias, skip, (gamma, dest[:, :, 2:])))):
            unfused = median_ms(lambda: m.apply_epilogue(m.winograd_conv(buf, u, inv_scale), then))
            fused = []
            for b in blocks:
                m.WINOGRAD_BLOCKS["output"] = b
                fused.append(median_ms(lambda: m.winograd_conv(buf, u, inv_scale, then)))
            m.WINOGRAD_BLOCKS["output"] = blocks[0]
            for i, ms in enumerate([unfused, *fused]):
                totals[i] += ms * calls / 2  # half of a shape's calls are each conv of a block
            lines.append(f"| {c} -> {co}, {t}, {h}x{w} | {calls // 2} | {label} | {unfused:.2f} | "
                         + " | ".join(f"{x:.2f}" for x in fused) + " |")
            print(lines[-1], flush=True)
    lines += ["", "decode-wide (s): unfused " + f"{totals[0] / 1e3:.3f}; "
              + "; ".join(f"fused {b} {x / 1e3:.3f}" for b, x in zip(blocks, totals[1:]))]
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
