"""Development probe (not part of the frozen harness): does the candidate's Winograd form of the
decoder's causal 3x3x3 convolutions (optimize.py's winograd_conv) beat cuDNN on this GPU, and what
does it cost in accuracy?

    python scripts/probe_winograd.py [--candidate optimize.py] [--against OLD.py] [--sweep] [--kernels]
                                     [--decode] [--decode-kernels] [--out FILE.md]
    TRITON_INTERPRET=1 python scripts/probe_winograd.py --check   # CPU: exact against F.conv3d

For each conv shape of one full-preset decode with wide channels it prints cuDNN's time
(cudnn.benchmark, as the decoder runs it) and the Winograd form's, the decode-wide difference,
and each result's error against an fp32 conv, with fp16 (shipped) and bf16 GEMM operands.
--against: the same for another candidate's winograd_conv (an earlier Winograd form), side by side.
--sweep: first, the candidate's WINOGRAD_BLOCKS (tiles, channels, warps of a transform program)
from a few choices, each transform in turn, each choice timed in alternation with the shipped setting
(summed over the widest shapes); one faster beyond the probe's noise is used for the table below.
--decode-kernels: instead of all that, one whole decode's GPU time by kernel (torch.profiler), the
candidate beside --against, each as build_decoder builds it: which kernels a change moved.
--kernels: instead of the table (and of --sweep and --decode), each kernel of winograd_conv alone
(torch.profiler, GPU time a call) at each shape, the candidate and --against in alternation, each
transform's bytes a second beside a device copy of as many bytes (a yardstick, not a ceiling: the
transforms read part of their bytes from L2), the GEMMs' TFLOP/s, and the weight transform where U
is made at each call (not kept).
--decode: afterwards, whole synthetic-weight decodes of the benchmark shape in this process: the
candidate (and --against) with Winograd from each --min-channels (512 and 1024): first call, median of 3,
peak memory, PSNR against an fp32 decode (TF32 on, PyTorch's defaults).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from _probe import benchmark_decode, load_module, median_ms, psnr, wall_times

ROOT = Path(__file__).resolve().parent.parent
CL = torch.channels_last_3d


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    diff = (x.float() - ref).flatten()
    return (diff.norm() / ref.flatten().norm()).item(), (diff.abs().max() / ref.abs().max()).item()


def operands(c, co, t, h, w, device, dtype):
    g = torch.Generator(device="cpu").manual_seed(0)
    buf = F.silu(torch.randn(1, c, t + 2, h, w, generator=g)).to(device, dtype).contiguous(memory_format=CL)
    wt = (torch.randn(co, c, 3, 3, 3, generator=g) / (27 * c) ** 0.5).to(device)
    return buf, wt


def check(m) -> None:
    """Small fp32 check of the transforms and slot layout against F.conv3d."""
    for c, co, t, h, w in ((64, 64, 3, 6, 8), (64, 128, 2, 4, 10)):
        buf, wt = operands(c, co, t, h, w, "cpu", torch.float32)
        ref = F.conv3d(buf, wt, padding=(0, 1, 1))
        out = m.winograd_conv(buf, *m.winograd_weight(wt, torch.float32))
        err = (out - ref).abs().max().item()
        print(f"check C {c} -> {co}, T {t}, {h}x{w}: max |winograd - conv3d| = {err:.2e}")
        assert err < 1e-4, err


SHAPES = [  # (C, Co, output frames, H, W, calls a decode): profiles/probe_convs_split.md's list
    (1024, 1024, 6, 88, 160, 60),
    (1024, 1024, 3, 44, 80, 100),
    (512, 512, 12, 176, 320, 50),
    (1024, 512, 12, 176, 320, 10),
    (256, 256, 12, 352, 640, 50),
    (512, 256, 12, 352, 640, 10),
]


# (tiles, channels, warps): the first seven give a thread two or four of a program's (tile, channel)
# elements (64 fp32 patch values each); the last four give it one, for more programs an SM (session 24).
BLOCK_CHOICES = [(8, 32, 4), (4, 64, 4), (8, 64, 8), (16, 32, 8), (16, 64, 8), (8, 64, 4), (4, 32, 2),
                 (4, 32, 4), (4, 64, 8), (2, 64, 4), (8, 32, 8)]


def sweep_blocks(m, dev, rounds: int = 4) -> list[str]:
    """m.WINOGRAD_BLOCKS, one transform at a time, the other at its shipped setting: each choice's
    summed time over the widest shapes (each conv times its calls a decode) beside the shipped
    setting's, in alternation (`rounds` pairs, which goes first swapped every round; the median of
    each side), so the gap reads against the probe's own noise (session 24: one setting timed 462
    and 479 ms in separate rows). A choice is taken for this process's table below only where it
    beats the shipped setting by more than that setting's own range; optimize.py is not changed,
    and the two transforms' choices are not timed together."""
    lines = []
    cases = [(operands(c, co, t, h, w, dev, torch.bfloat16), calls) for c, co, t, h, w, calls in SHAPES[:4]]
    u = [(m.winograd_weight(wt, torch.float16), buf, calls) for (buf, wt), calls in cases]
    shipped = dict(m.WINOGRAD_BLOCKS)

    def decode_ms(which: str, choice: tuple[int, int, int]) -> float:
        m.WINOGRAD_BLOCKS[which] = choice
        try:
            return sum(median_ms(lambda: m.winograd_conv(buf, *uu), trials=5) * calls for uu, buf, calls in u)
        finally:
            m.WINOGRAD_BLOCKS[which] = shipped[which]

    taken = dict(shipped)
    for which in ("input", "output"):
        best_gap = 0.0
        for choice in BLOCK_CHOICES:
            if choice == shipped[which]:
                continue
            base, this = [], []
            for r in range(rounds):
                order = [(base, shipped[which]), (this, choice)]
                for side, setting in order if r % 2 == 0 else order[::-1]:
                    side.append(decode_ms(which, setting))
            noise = max(base) - min(base)
            gap = statistics.median(this) - statistics.median(base)
            lines.append(f"- {which} transform blocks {choice}: {statistics.median(this):.0f} ms a decode (4 wide "
                         f"shapes) against {statistics.median(base):.0f} ms for the shipped {shipped[which]} "
                         f"({gap:+.0f} ms; the shipped setting's own range over {rounds} rounds: {noise:.0f} ms)")
            print(lines[-1], flush=True)
            if gap < -noise and gap < best_gap:
                taken[which], best_gap = choice, gap
    m.WINOGRAD_BLOCKS.update(taken)
    lines.append(f"- taken for the table below: {taken} (shipped: {shipped}): a choice beyond the shipped setting's "
                 "own range, or the shipped one; the two transforms' choices not timed together")
    return lines


def kernel_us(fn, calls: int = 5) -> dict[str, float]:
    """GPU microseconds a call of fn spends in each kernel, over `calls` calls: the harness's own profile
    summary (harness/measure/profile.py), its matmul class (cuBLAS's kernels) as "GEMM"."""
    from harness.measure import profile

    fn()
    torch.cuda.synchronize()
    with profile.capture("cuda") as prof:
        for _ in range(calls):
            fn()
    times: dict[str, float] = {}
    for row in profile.summarize(prof, "cuda", top=10_000)["top"]:
        name = "GEMM" if row["category"] == "attention/matmul" else row["name"]
        times[name] = times.get(name, 0.0) + row["time_s"] * 1e6 / calls
    return times


def made_u_us(m, wt: torch.Tensor) -> float:
    """GPU microseconds of making U at a call (the weight transform), for a conv whose U is not kept
    (0 where it is kept, or where the module keeps every U)."""
    if not hasattr(m, "WinogradWeight"):
        return 0.0
    w = m.WinogradWeight(wt, torch.float16)
    if w.kept is None:
        return sum(kernel_us(w.u).values())
    return 0.0


def copy_rate(nbytes: int, dev) -> float:
    """GB/s of a device copy that reads nbytes / 2 and writes as many (10 back to back a trial: one copy
    of a few tens of MB is too short to time alone)."""
    src = torch.empty(nbytes // 4, dtype=torch.float16, device=dev)
    dst = torch.empty_like(src)
    return nbytes / median_ms(lambda: dst.copy_(src), trials=10, reps=10) / 1e6


def rate(amount: float, us: float, unit: float) -> str:
    """amount / us in `unit`s a second (GB/s: 1e3, TFLOP/s: 1e6), or '-' where the kernel was not seen."""
    return f"{amount / us / unit:.0f}" if us > 0 else "-"


def kernel_table(mods: dict, dev, rounds: int = 3) -> list[str]:
    """Each kernel of winograd_conv alone, a shape at a time, the modules in alternation (which goes
    first swapped every round; the median of the rounds): GPU ms a decode (a call's time times the
    shape's calls), for each transform its bytes a second beside a copy of as many bytes, and the
    weight transform's time where a conv makes its U at each call."""
    lines = ["| C -> Co, frames, HxW | module | input transform ms (GB/s) | GEMMs ms (TFLOP/s) | "
             "output transform ms (GB/s) | other ms | U made at each call ms | copy of the input / output transform's bytes GB/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    totals = {label: 0.0 for label in mods}
    for c, co, t, h, w, calls in SHAPES:
        buf, wt = operands(c, co, t, h, w, dev, torch.bfloat16)
        tiles = -(-h // 6) * -(-w // 6)
        in_bytes = (t + 2) * (h * w + 64 * tiles) * c * 2  # the frames read, V written (fp16)
        out_bytes = t * (64 * tiles + h * w) * co * 2      # M read, the frames written
        gemm_flops = 2 * 64 * tiles * 3 * c * co * t
        copies = f"{copy_rate(in_bytes, dev):.0f} / {copy_rate(out_bytes, dev):.0f}"
        per = {label: [] for label in mods}
        for r in range(rounds):
            order = list(mods.items())
            for label, mod in order if r % 2 == 0 else order[::-1]:
                u = mod.winograd_weight(wt, torch.float16)
                per[label].append({**kernel_us(lambda: mod.winograd_conv(buf, *u)), "U made": made_u_us(mod, wt)})
        for label in mods:
            us = {k: statistics.median(d.get(k, 0.0) for d in per[label]) for k in per[label][0]}
            t_in, t_out = us.pop("_input_transform", 0.0), us.pop("_output_transform", 0.0)
            t_gemm, t_u = us.pop("GEMM", 0.0), us.pop("U made", 0.0)
            other = sum(us.values())
            totals[label] += (t_in + t_out + t_gemm + other + t_u) * calls / 1e3
            lines.append(f"| {c} -> {co}, {t}, {h}x{w} | {label} | {t_in * calls / 1e3:.1f} ({rate(in_bytes, t_in, 1e3)}) | "
                         f"{t_gemm * calls / 1e3:.1f} ({rate(gemm_flops, t_gemm, 1e6)}) | "
                         f"{t_out * calls / 1e3:.1f} ({rate(out_bytes, t_out, 1e3)}) | {other * calls / 1e3:.1f} | "
                         f"{t_u * calls / 1e3:.1f} | {copies} |")
            print(lines[-1], flush=True)
        buf = wt = None  # freed before the next shape
        torch.cuda.empty_cache()
    lines.append("")
    lines += [f"- {label}: {ms:.0f} ms of GPU time a decode in these six shapes" for label, ms in totals.items()]
    return lines


def decode_ab(mods: dict, dev, min_channels: list[int]) -> list[str]:
    """Whole decodes with synthetic weights: first call, median of 3, peak memory, PSNR."""
    vae, z = benchmark_decode(dev)
    with torch.no_grad():
        ref = vae.decode(z)
    lines = ["", "| decoder | Winograd from | first call s | median s | peak GB | PSNR dB vs fp32 (TF32) |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, m in mods.items():
        for min_c in min_channels:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            dec = m.FastDecoder(vae, torch.bfloat16, m.LATENT_FRAMES_PER_PASS, winograd_min_channels=min_c)
            _, (first,) = wall_times(lambda: dec(z), 1)
            out, times = wall_times(lambda: dec(z), 3)
            peak = torch.cuda.max_memory_allocated() / 1e9
            lines.append(f"| {label} | {min_c} | {first:.1f} | {sorted(times)[1]:.3f} | {peak:.1f} | "
                         f"{psnr(out, ref)[0]:.2f} |")
            print(lines[-1], flush=True)
            dec = out = None  # freed before the next decoder is built
    return lines


def decode_kernels(mods: dict, dev, top: int = 25) -> list[str]:
    """One whole decode's GPU time by kernel, the candidate beside `against`, in that order (not alternated:
    for kernels that moved by milliseconds, not for small differences). Each is built as build_decoder
    builds it; a first call compiles; the median wall time of the next three calls; then kernel_us's own
    warm call and one profiled call."""
    vae, z = benchmark_decode(dev)
    per: dict[str, dict[str, float]] = {}
    walls: dict[str, float] = {}
    for label, m in mods.items():
        decode, _ = m.build_decoder(vae, z)
        decode(z)  # compiles (its output dropped at once)
        times = wall_times(lambda: decode(z), 3)[1]
        walls[label] = sorted(times)[1]
        per[label] = kernel_us(lambda: decode(z), calls=1)
        decode = None  # freed before the next one is built
        torch.cuda.empty_cache()
    labels = list(mods)
    names = sorted({n for t in per.values() for n in t}, key=lambda n: -max(t.get(n, 0.0) for t in per.values()))
    lines = ["One decode (1x48x31x44x80, synthetic weights), median wall of 3 calls: "
             + ", ".join(f"{label} {walls[label]:.3f} s" for label in labels), "",
             "| kernel | " + " | ".join(f"{label} ms" for label in labels) + " |",
             "|---|" + "---:|" * len(labels)]
    for n in names[:top]:
        lines.append(f"| {n[:70]} | " + " | ".join(f"{per[label].get(n, 0.0) / 1e3:.1f}" for label in labels) + " |")
    lines.append("| **all kernels** | " + " | ".join(f"**{sum(per[label].values()) / 1e3:.1f}**" for label in labels) + " |")
    return lines


def report(lines: list[str], out: str | None) -> None:
    """Print the report, and write it to `out` where given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", default=str(ROOT / "targets" / "wan-vae" / "optimize.py"))
    ap.add_argument("--out")
    ap.add_argument("--against")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--kernels", action="store_true")
    ap.add_argument("--decode-kernels", action="store_true",
                    help="one whole decode's GPU time by kernel, the candidate beside --against")
    ap.add_argument("--min-channels", type=int, nargs="+", default=[512, 1024],
                    help="--decode: the winograd_min_channels of each decode")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    m = load_module(Path(args.candidate))
    old = load_module(Path(args.against), "against") if args.against else None
    if args.check:
        return check(m)
    if not torch.cuda.is_available():
        print("probe_winograd.py: needs a CUDA GPU (TRITON_INTERPRET=1 ... --check runs on the CPU)", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    mods = {"candidate": m, **({"against": old} if old else {})}
    if args.decode_kernels or args.kernels:
        flag, title, table = (("--decode-kernels", "A decode's kernels", decode_kernels) if args.decode_kernels
                              else ("--kernels", "Winograd kernels", kernel_table))
        return report([f"# {title} ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
                       f"Triton {m.triton.__version__})", "", f"`python scripts/probe_winograd.py {flag}`: "
                       f"candidate {Path(args.candidate).name}, against {args.against or 'none'}.", "",
                       *table(mods, dev)], args.out)
    sweep = sweep_blocks(m, dev) if args.sweep else []
    lines = [f"# Winograd probe ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"Triton {m.triton.__version__}, cuDNN {torch.backends.cudnn.version()})", "",
             f"`python scripts/probe_winograd.py`: {Path(args.candidate).name}'s winograd_conv against cuDNN "
             "(cudnn.benchmark), each conv alone on random operands, median of 10 (CUDA events). Error = "
             "||x - ref|| / ||ref|| (in brackets max|x - ref| / max|ref|), ref = an fp32 conv of the same "
             "bf16 input with the fp32 weights; cuDNN's conv uses the bf16 weights the decoder keeps.", "",
             *sweep, "", f"Against: {args.against or 'none'} (its Winograd ms and fp16 error, when given).", "",
             "| C -> Co, frames, HxW | calls | cuDNN ms | TFLOP/s | Winograd ms | saved a decode (ms) | "
             "cuDNN err | Winograd fp16 err | Winograd bf16 err | against ms | against fp16 err |",
             "|---|---:|---:|---:|---:|---:|---|---|---|---:|---|"]
    for c, co, t, h, w, calls in SHAPES:
        buf, wt = operands(c, co, t, h, w, dev, torch.bfloat16)
        wb = wt.to(torch.bfloat16).contiguous(memory_format=CL)
        ref = F.conv3d(buf.float(), wt, padding=(0, 1, 1))
        u16, u_bf = m.winograd_weight(wt, torch.float16), m.winograd_weight(wt, torch.bfloat16)
        direct = lambda: F.conv3d(buf, wb, padding=(0, 1, 1))  # noqa: E731
        ms_cudnn = median_ms(direct, trials=10)
        ms_w = median_ms(lambda: m.winograd_conv(buf, *u16), trials=10)
        flops = 2 * 27 * c * co * t * h * w
        e_c, e_16, e_bf = (rel_err(x, ref) for x in (direct(), m.winograd_conv(buf, *u16), m.winograd_conv(buf, *u_bf)))
        row = (f"| {c} -> {co}, {t}, {h}x{w} | {calls} | {ms_cudnn:.2f} | {flops / ms_cudnn / 1e9:.0f} | "
               f"{ms_w:.2f} | {(ms_cudnn - ms_w) * calls:.0f} | {e_c[0]:.2e} ({e_c[1]:.1e}) | "
               f"{e_16[0]:.2e} ({e_16[1]:.1e}) | {e_bf[0]:.2e} ({e_bf[1]:.1e}) |")
        if old is not None:
            u_old = old.winograd_weight(wt, torch.float16)
            e_old = rel_err(old.winograd_conv(buf, *u_old), ref)
            row += f" {median_ms(lambda: old.winograd_conv(buf, *u_old), trials=10):.2f} | {e_old[0]:.2e} ({e_old[1]:.1e}) |"
        else:
            row += " | |"
        print(row, flush=True)
        lines.append(row)
        torch.cuda.empty_cache()
    if args.decode:
        lines += decode_ab(mods, dev, args.min_channels)
    return report(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
