"""Probe (GPU): can the decode's main convolutions run faster than cudnn.benchmark's pick, and what
does a residual epilogue cost when cuDNN fuses it? Not a harness row: it informs the next
experiment (issue 11's leads), and prints a markdown table.

For each of the decode's three main 3x3x3 conv shapes (bf16, channels-last, as optimize.py runs
them), in one process, CUDA-event timed, median of 5 trials:
  1. torch conv3d after cudnn.benchmark with torch's default benchmark_limit (10 engines tried);
  2. the same with benchmark_limit = 0 (every engine cuDNN offers);
  3. conv + bias + residual add as torch ops (the unfused epilogue, for scale);
  4. through cudnn-frontend's Python API, every execution plan cuDNN builds for the conv alone
     and for conv -> bias -> add(skip) fused, timed one by one: the best of each.

    python scripts/probe_conv_engines.py [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from _probe import median_ms

SHAPES = [(256, 14, 352, 640), (512, 14, 176, 320), (1024, 8, 88, 160)]
CL = torch.channels_last_3d


def timed(fn, reps: int = 5, trials: int = 5) -> float:
    """Median over trials of the mean ms a run (CUDA events), after two warm-up runs."""
    return median_ms(fn, trials=trials, reps=reps, warmup=2)


def torch_conv(x, w, limit: int) -> float:
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.benchmark_limit = limit
    return timed(lambda: F.conv3d(x, w, padding=(0, 1, 1)))


def cudnn_graph_best(x, w, bias=None, skip=None, quick=False) -> tuple[float, int, str]:
    """(best ms, plans that ran, its name) over every plan of conv [-> bias -> add(skip)]; quick:
    fewer timed runs a plan, and the name says the best plan's rank in cuDNN's heuristic order
    and the first plan's time."""
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    bf16 = cudnn.data_type.BFLOAT16
    g = cudnn.pygraph(io_data_type=bf16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    X = g.tensor(name="X", dim=list(x.shape), stride=list(x.stride()), data_type=bf16)
    W = g.tensor(name="W", dim=list(w.shape), stride=list(w.stride()), data_type=bf16)
    y = F.conv3d(x, w, padding=(0, 1, 1))
    Y = g.conv_fprop(image=X, weight=W, padding=[0, 1, 1], stride=[1, 1, 1], dilation=[1, 1, 1])
    pack = {X: x, W: w}
    if bias is not None:
        B = g.tensor(name="B", dim=list(bias.shape), stride=list(bias.stride()), data_type=bf16)
        S = g.tensor(name="S", dim=list(skip.shape), stride=list(skip.stride()), data_type=bf16)
        Y = g.add(name="skip", a=g.bias(name="bias", input=Y, bias=B), b=S)
        pack.update({B: bias, S: skip})
    Y.set_output(True).set_data_type(bf16).set_dim(list(y.shape)).set_stride(list(y.stride()))
    pack[Y] = y
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    best, ran, name, first = float("inf"), 0, "", None
    for i in range(g.get_execution_plan_count()):
        try:
            ws = torch.empty(max(g.get_workspace_size_plan_at_index(i), 1), device="cuda", dtype=torch.uint8)
            ms = timed(lambda: g.execute_plan_at_index(pack, ws, index=i, handle=handle),
                       reps=1 if quick else 3, trials=3)
        except Exception:  # noqa: BLE001 - a plan that does not run is skipped
            continue
        ran += 1
        first = ms if first is None else first
        if ms < best:
            best, name = ms, f"{g.get_plan_name_at_index(i)} (rank {i}; plan 0 {first:.3f} ms)"
    return best, ran, name


def quick(out: str | None) -> int:
    """Every main conv shape of the decode (in, out channels): cudnn.benchmark's pick vs the best
    cudnn-frontend plan, the conv alone."""
    shapes = [(256, 256, 14, 352, 640), (512, 512, 14, 176, 320), (1024, 1024, 8, 88, 160),
              (1024, 512, 14, 176, 320), (512, 256, 14, 352, 640), (1024, 1024, 5, 44, 80)]
    lines = ["| conv (Cin -> Cout, T, H, W) | cudnn.benchmark (limit 10) | cudnn-frontend best plan |", "|---|---:|---:|"]
    for ci, co, t, h, w in shapes:
        x = torch.randn(1, ci, t, h, w, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=CL)
        k = (torch.randn(co, ci, 3, 3, 3, device="cuda", dtype=torch.bfloat16) * 0.02).contiguous(memory_format=CL)
        flop = 2.0 * ci * co * 27 * (t - 2) * h * w
        ms0 = torch_conv(x, k, 10)
        ms, ran, name = cudnn_graph_best(x, k, quick=True)
        lines.append(f"| {ci} -> {co}, {t}, {h}, {w} | {ms0:.3f} ({flop / ms0 / 1e9:.0f}) | "
                     f"{ms:.3f} ({flop / ms / 1e9:.0f}); {ran} plans; `{name}` |")
        print(lines[-1], flush=True)
        del x, k
        torch.cuda.empty_cache()
    if out:
        open(out, "w").write("\n".join(lines) + "\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--quick", action="store_true", help="conv alone, every main shape, fewer runs a plan")
    a = p.parse_args()
    if a.quick:
        return quick(a.out)
    lines = [f"# Conv engines probe: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"cuDNN {torch.backends.cudnn.version()}", "",
             "ms a run (CUDA events, median of 5 trials); TFLOP/s in brackets.", "",
             "| conv (C, T, H, W) | benchmark, limit 10 | benchmark, limit 0 | + bias + skip (torch ops) "
             "| cudnn-frontend conv, best plan | conv + bias + skip fused, best plan |", "|---|---:|---:|---:|---:|---:|"]
    for c, t, h, w in SHAPES:
        x = torch.randn(1, c, t, h, w, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=CL)
        k = (torch.randn(c, c, 3, 3, 3, device="cuda", dtype=torch.bfloat16) * 0.02).contiguous(memory_format=CL)
        bias = torch.randn(1, c, 1, 1, 1, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=CL)
        skip = torch.randn(1, c, t - 2, h, w, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=CL)
        flop = 2.0 * c * c * 27 * (t - 2) * h * w
        rate = lambda ms: f"{ms:.3f} ({flop / ms / 1e9:.0f})"  # noqa: E731
        cells = [torch_conv(x, k, 10), torch_conv(x, k, 0)]
        cells.append(timed(lambda: torch.add(F.conv3d(x, k, padding=(0, 1, 1)).add_(bias), skip)))
        row = [rate(v) for v in cells]
        for extra in ((), (bias, skip)):
            try:
                ms, ran, name = cudnn_graph_best(x, k, *extra)
                row.append(f"{rate(ms)}; {ran} plans; `{name}`")
            except Exception as e:  # noqa: BLE001 - report, go on
                row.append(f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}")
        lines.append(f"| {c}, {t}, {h}, {w} | " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
        del x, k, bias, skip
        torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
