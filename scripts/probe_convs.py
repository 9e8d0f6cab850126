"""Development probe (not part of the frozen harness): where do the convolutions of a candidate's
decode spend their time, layer by layer, and would the head conv run faster in another shape?

    python scripts/probe_convs.py [--candidate optimize.py] [--shape 1 48 31 44 80] [--out FILE.md]

1. Runs the candidate's decoder on the meta device (no compute) to list every F.conv3d it makes:
   input shape, weight shape, padding, and how often each occurs in one decode.
2. On CUDA, times each distinct conv alone (bf16, channels_last_3d, cudnn.benchmark, random
   data: conv speed does not depend on values) with CUDA events, median of 5 after a warm-up.
3. Times the head conv (256 -> 12 channels, 3x3x3) padded to 16/32/64 output channels, and as one
   2D conv per frame with the three time taps stacked on the output channels (then summed).
4. Times the slow wide convs (3x3x3, under 730 TFLOP/s, 100 ms or more a decode) split in two:
   by input channels (two half-width convs whose outputs a later kernel would sum) and by output
   channels (two convs of the whole input, half the outputs each).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from _probe import load_module, median_ms

ROOT = Path(__file__).resolve().parent.parent
from harness import target
target.use("wan-vae")  # the worked example's packages by name (harness/target/)
from model import LATENT_MEAN, LATENT_STD, WanVAE

CL = torch.channels_last_3d


def list_convs(candidate: Path, shape: list[int]) -> collections.Counter:
    mod = load_module(candidate)
    with torch.device("meta"):
        vae = WanVAE()
        vae.latent_mean, vae.latent_std = torch.tensor(LATENT_MEAN), torch.tensor(LATENT_STD)
    dec = mod.FastDecoder(vae, torch.bfloat16, mod.LATENT_FRAMES_PER_PASS)
    seen: collections.Counter = collections.Counter()
    real = F.conv3d

    def spy(x, w, b=None, stride=1, padding=0, *a, **k):
        pad = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,) * 3
        seen[(tuple(x.shape), tuple(w.shape), pad)] += 1
        return real(x, w, b, stride, padding, *a, **k)

    mod.F.conv3d = spy
    try:
        dec(torch.zeros(*shape, device="meta"))
    finally:
        mod.F.conv3d = real
    return seen


def time_ms(fn, reps: int = 5) -> float:
    return median_ms(fn, trials=reps)


def conv_flops(x: tuple, w: tuple, pad: tuple) -> float:
    out_t = x[2] + 2 * pad[0] - w[2] + 1
    out_h = x[3] + 2 * pad[1] - w[3] + 1
    out_w = x[4] + 2 * pad[2] - w[4] + 1
    return 2.0 * x[0] * w[0] * out_t * out_h * out_w * w[1] * w[2] * w[3] * w[4]


def rand(*shape: int, fmt=CL) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=fmt)


def per_layer(seen: collections.Counter) -> list[str]:
    rows, total_ms, total_fl = [], 0.0, 0.0
    for (xs, ws, pad), count in seen.items():
        x, w = rand(*xs), rand(*ws)
        ms = time_ms(lambda: F.conv3d(x, w, None, padding=pad))
        fl = conv_flops(xs, ws, pad)
        rows.append((ms * count, xs, ws, pad, count, ms, fl / ms / 1e9))
        total_ms += ms * count
        total_fl += fl * count
        del x, w
    rows.sort(reverse=True)
    out = ["| input (N C T H W) | weight (O I kT kH kW) | pad | calls | ms a call | TFLOP/s | ms in all |",
           "|---|---|---|---:|---:|---:|---:|"]
    out += [f"| {xs} | {ws} | {pad} | {n} | {ms:.2f} | {tf:.0f} | {tot:.1f} |" for tot, xs, ws, pad, n, ms, tf in rows]
    out.append(f"\nSum over the decode: {total_ms / 1000:.3f} s for {total_fl / 1e15:.3f} PFLOP "
               f"({total_fl / total_ms / 1e9:.0f} TFLOP/s).")
    return out


def head_variants(seen: collections.Counter) -> list[str]:
    heads = [(xs, ws, pad, n) for (xs, ws, pad), n in seen.items() if ws[0] <= 16 and ws[2] == 3]
    if not heads:
        return ["No head conv (<= 16 output channels, 3 time taps) found."]
    xs, ws, pad, _ = max(heads, key=lambda h: h[3])
    n, cin, t_in, h, w = xs
    x = rand(*xs)
    out = [f"Head conv input {xs}, padding {pad}; 12 useful output channels.", "",
           "| variant | ms a call |", "|---|---:|"]
    for cout in (12, 16, 32, 64):
        wt = rand(cout, cin, 3, 3, 3)
        out.append(f"| 3x3x3 conv3d, {cout} output channels | {time_ms(lambda: F.conv3d(x, wt, None, padding=pad)):.2f} |")
    # One 2D conv over all frames, the 3 time taps as 3 x 16 output channels, then a shifted sum.
    frames = x.permute(0, 2, 1, 3, 4).reshape(n * t_in, cin, h, w).contiguous(memory_format=torch.channels_last)
    w2 = rand(48, cin, 3, 3, fmt=torch.channels_last)

    def stacked_taps():
        z = F.conv2d(frames, w2, None, padding=pad[1:]).view(n, t_in, 3, 16, h, w)
        return z[:, :-2, 0] + z[:, 1:-1, 1] + z[:, 2:, 2]

    out.append(f"| 2D conv per frame, 3 time taps x 16 channels, shifted sum | {time_ms(stacked_taps):.2f} |")
    return out


def split_variants(seen: collections.Counter) -> list[str]:
    out = ["| input (N C T H W) | weight (O I kT kH kW) | whole | input halves | input halves + add | output halves |",
           "|---|---|---:|---:|---:|---:|"]
    for (xs, ws, pad), count in seen.items():
        if ws[2:] != (3, 3, 3):
            continue
        x, w = rand(*xs), rand(*ws)
        whole = time_ms(lambda: F.conv3d(x, w, None, padding=pad))  # per_layer keeps no times
        if whole * count < 100 or conv_flops(xs, ws, pad) / whole / 1e9 >= 730:
            continue
        ci, co = ws[1] // 2, ws[0] // 2
        xa, xb = x[:, :ci].contiguous(memory_format=CL), x[:, ci:].contiguous(memory_format=CL)
        wa, wb = w[:, :ci].contiguous(memory_format=CL), w[:, ci:].contiguous(memory_format=CL)
        wc, wd = w[:co].contiguous(memory_format=CL), w[co:].contiguous(memory_format=CL)
        halves_in = time_ms(lambda: (F.conv3d(xa, wa, None, padding=pad), F.conv3d(xb, wb, None, padding=pad)))
        halves_add = time_ms(lambda: F.conv3d(xa, wa, None, padding=pad) + F.conv3d(xb, wb, None, padding=pad))
        halves_out = time_ms(lambda: (F.conv3d(x, wc, None, padding=pad), F.conv3d(x, wd, None, padding=pad)))
        out.append(f"| {xs} | {ws} | {whole:.2f} | {halves_in:.2f} | {halves_add:.2f} | {halves_out:.2f} |")
        del x, w, xa, xb, wa, wb, wc, wd
    if len(out) == 2:
        return ["No 3x3x3 conv under 730 TFLOP/s with 100 ms or more a decode."]
    return ["ms a call, each the median of 5.", "", *out]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidate", type=Path, default=ROOT / "targets" / "wan-vae" / "optimize.py")
    ap.add_argument("--shape", type=int, nargs=5, default=[1, 48, 31, 44, 80])
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    seen = list_convs(a.candidate, a.shape)
    print(f"{sum(seen.values())} conv calls, {len(seen)} distinct shapes", flush=True)
    if not torch.cuda.is_available():
        print("no CUDA: listed the convs only", file=sys.stderr)
        return 0
    torch.backends.cudnn.benchmark = True
    with torch.no_grad():
        lines = [f"# Conv probe: {a.candidate.name}, latent {a.shape}", "",
                 f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
                 f"cuDNN {torch.backends.cudnn.version()}; each conv timed alone, median of 5 (CUDA events).",
                 "", "## Every conv of one decode", "", *per_layer(seen), "", "## Head conv variants", "",
                 *head_variants(seen), "", "## Slow convs split in two", "", *split_variants(seen)]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
