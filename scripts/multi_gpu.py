"""Measurement (GPUs of one host): optimize.py's decode split across N GPUs
(integrations/split_decode.py: the frame cut into slabs, each conv's halo rows exchanged over
NCCL) against the same decode on one GPU, on the synthetic weights and a seeded latent.

For each N in --gpus, N processes (one a GPU) build the decoder, decode once (the first call),
then --runs timed calls. The clock runs on rank 0, from the latent in hand to the whole video
gathered there, every rank synchronized at both ends. Printed and written to --out: median,
first call, peak GPU memory of each rank (allocated; on GPUs also the allocator's reserved peak and what
the GPU holds outside it, whose sum bounds what a memory clause sees), the speedup over N = 1 and its scaling efficiency, and
PSNR (10 log10(4 / MSE), the gate's) of the N-GPU video against the one-GPU decode and against
the frozen model's fp32 decode (PyTorch defaults), over the whole video and over the columns
(or rows) within 16 pixels of each slab border. --per-call: each timed call's seconds, and for
each rank when its decode returned (its launches queued, before the wait for its GPU) and the CPU
seconds its launching thread had spent by then: a rank that returns only at the call's end with
its thread busy throughout is bound by its kernel launches, not by its GPU or the exchange; and the
seconds the interpreter's garbage collector ran during the call, with the oldest generation it
collected (a collection on one rank would stall its peers at the next exchange). --freeze-gc:
gc.freeze() on every rank after the first call, so the collector no longer walks what the build
and that call made. --slab-alone also times one rank's slab decoded alone on one GPU (no exchange,
no gather): the compute a rank does, so the rest is the split's overhead. --profile DIR: one more
call under torch.profiler on every rank, its top kernels (GPU time: compute against NCCL) written
to DIR/profile_{candidate}_n{N}_rank{R}.txt.

    python scripts/multi_gpu.py --gpus 1,2 --out profiles/multi_gpu_h200.md
    python scripts/multi_gpu.py --gpus 1,2 --backend gloo --preset tiny    # the same steps on CPU
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parent.parent
from harness import target
target.use("wan-vae")  # the worked example's packages by name (harness/target/)

from _probe import psnr as psnr_and_max_abs
from harness import _common
from integrations.split_decode import HEIGHT, choose_split

BORDER = 16  # video pixels on each side of a slab border in the border PSNR
STALL_S = float(os.environ.get("MULTI_GPU_STALL_S", 240))  # a rank still running after this long is hung: its stacks are printed and it exits


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return psnr_and_max_abs(a, b)[0]


def device_of(rank: int, backend: str) -> torch.device:
    return torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class GcClock:
    """The garbage collector's running time in this process, from gc.callbacks: seconds so far, and
    the oldest generation collected since the last `take`."""

    def __init__(self) -> None:
        self.seconds, self.oldest, self._start = 0.0, -1, 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.oldest = max(self.oldest, info["generation"])

    def take(self) -> tuple[float, int]:
        """(seconds so far, the oldest generation since the last take; -1: none ran)."""
        oldest, self.oldest = self.oldest, -1
        return self.seconds, oldest


def rank_main(rank: int, world: int, store: str, backend: str, shape: list[int], runs: int, out: str,
              candidate: str, profile_dir: str | None = None, freeze_gc: bool = False) -> None:
    """One rank: build, first call, timed calls; rank 0 saves the video and the figures to `out`."""
    from integrations.split_decode import build_split_decoder
    from harness.target.loader import load_source

    # A hung rank prints where (every rank, so both sides of a stuck exchange show), then ends.
    faulthandler.dump_traceback_later(STALL_S, exit=False)
    ender = threading.Timer(STALL_S + 15, os._exit, (3,))
    ender.daemon = True
    ender.start()
    device = device_of(rank, backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            **({"device_id": device} if device.type == "cuda" else {}))
    adapter = _common.load_adapter(_common.load_goals())
    vae = adapter.load_model(device)
    z = adapter.make_input(shape, 1, device)
    optimize = load_source(Path(candidate), name="optimize_split")
    decode, info = build_split_decoder(optimize.build_decoder, vae, z, namespace=vars(optimize))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    collector = GcClock()
    # per_call: (seconds to the decode's return, its thread's CPU seconds by then, the collector's
    # seconds within the call, the oldest generation it collected or -1); plain tuples, which torch.load reads
    times, per_call = [], []
    for call in range(1 + runs):
        if call == 1 and freeze_gc:
            gc.freeze()
        dist.barrier()
        sync(device)
        gc_before, _ = collector.take()
        start, cpu = time.perf_counter(), time.thread_time()
        video = decode(z if rank == 0 else None)
        returned, cpu = time.perf_counter() - start, time.thread_time() - cpu
        sync(device)
        times.append(time.perf_counter() - start)
        gc_after, oldest = collector.take()
        per_call.append((returned, cpu, gc_after - gc_before, oldest))
        dist.barrier()
    memory = memory_gb(device)
    if profile_dir:
        profile_call(decode, z if rank == 0 else None, device,
                     Path(profile_dir) / f"profile_{Path(candidate).stem}_n{world}_rank{rank}.txt")
    every_per_call, memories = [None] * world, [None] * world
    dist.all_gather_object(memories, memory)
    dist.all_gather_object(every_per_call, per_call[1:])
    if rank == 0:
        torch.save({"video": video.cpu(), "first_s": times[0], "median_s": statistics.median(times[1:]),
                    "times_s": times[1:], "per_call": every_per_call, "memory_gb": memories,
                    "peaks_gb": [m[0] if m else float("nan") for m in memories],
                    "split": info.get("split")}, out)
    dist.barrier()
    # No destroy_process_group: after NCCL operations were captured into a CUDA graph it can hang
    # (pytorch/pytorch#115388); the process ends here, its communicators with it.
    sys.stdout.flush()
    os._exit(0)


def profile_call(decode, z, device: torch.device, path: Path) -> None:
    """One call under torch.profiler: its 25 costliest ops by device (or CPU) time, to `path`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    dist.barrier()
    with profile(activities=activities) as prof:
        decode(z)
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    path.write_text(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=70))


def memory_gb(device: torch.device) -> tuple[float, float, float] | None:
    """A rank's GPU memory after its calls, GB: (allocated peak, the allocator's reserved peak, what the
    GPU holds outside the allocator: its CUDA context, NCCL's buffers, the libraries' workspaces). The
    harness's memory clause leaves a candidate N GB of the GPU for all of it (harness/measure/memory_limit.py):
    reserved peak + outside bounds from above what the clause sees, since under a cap the allocator frees its
    cache and retries before it fails (NCCL's own allocations cannot). The peaks start after the build."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    return (torch.cuda.max_memory_allocated(device) / 1e9, torch.cuda.max_memory_reserved(device) / 1e9,
            (total - free - reserved) / 1e9)


def run(world: int, backend: str, shape: list[int], runs: int, folder: Path, candidate: Path,
        profile_dir: Path | None = None, freeze_gc: bool = False) -> dict:
    run_dir = Path(tempfile.mkdtemp(dir=folder))  # a fresh rendezvous file for each run
    out, store = run_dir / "out.pt", run_dir / "store"
    mp.spawn(rank_main, args=(world, str(store), backend, shape, runs, str(out), str(candidate),
                              str(profile_dir) if profile_dir else None, freeze_gc),
             nprocs=world, join=True)
    return torch.load(out)


def border_psnr(a: torch.Tensor, b: torch.Tensor, split: dict | None) -> float | None:
    """PSNR over the video columns (or rows) within BORDER pixels of each slab border."""
    if not split:
        return None
    axis = HEIGHT if split["axis"] == "height" else -1
    edges, start = [], 0
    for size in split["latent_slabs"][:-1]:
        start += 16 * size
        edges.append(torch.arange(start - BORDER, start + BORDER))
    index = torch.cat(edges)
    return psnr(a.index_select(axis, index), b.index_select(axis, index))


def memory_table(results: dict[int, dict]) -> list[str]:
    """Each count's ranks: allocated peak / reserved peak / outside the allocator, and the reserved peak
    plus the outside, an upper bound of the GPU's peak as a memory clause sees it (memory_gb); nothing on CPU."""
    if not any(results[n]["memory_gb"][0] for n in results):
        return []
    lines = ["", "Memory a rank after the calls (peaks since the build), GB: allocated peak / reserved peak / outside "
             "the allocator (context, NCCL, workspaces) = reserved peak + outside, an upper bound", ""]
    for n, r in results.items():
        ranks = "; ".join(f"rank {k}: {a:.2f} / {res:.2f} / {out:.2f} = {res + out:.2f}"
                          for k, (a, res, out) in enumerate(r["memory_gb"]))
        lines.append(f"- {n} GPU(s): {ranks}")
    return lines


def per_call_table(results: dict[int, dict]) -> list[str]:
    """Each timed call of each count: its seconds (rank 0's clock), then for each rank the seconds
    at which its decode returned / its launching thread's CPU seconds by then / the garbage
    collector's milliseconds within the call (gen: the oldest generation it collected)."""
    lines = []
    for n, r in results.items():
        lines += ["", f"Timed calls on {n} GPU(s): seconds; each rank's decode returned at / its thread's CPU by then / "
                  "the garbage collector's ms in the call (the oldest generation)", "",
                  "| call | seconds | " + " | ".join(f"rank {k}" for k in range(n)) + " |", "|---:|---:|" + "---:|" * n]
        for i, t in enumerate(r["times_s"]):
            ranks = " | ".join(f"{returned:.3f} / {cpu:.3f} / {1e3 * gc_s:.1f} ms" + (f" (gen {oldest})" if oldest >= 0 else "")
                               for returned, cpu, gc_s, oldest in (rank[i] for rank in r["per_call"]))
            lines.append(f"| {i + 1} | {t:.3f} | {ranks} |")
    return lines


def candidate_table(results: dict[int, dict], alone: dict[int, float], reference: torch.Tensor,
                    first_one: dict, first: Path) -> list[str]:
    """One candidate's rows: a GPU count a row; the speedup over its own one-GPU decode and over the
    first candidate's (the comparison of two candidates on the same GPUs)."""
    one = results[1]
    lines = [f"| GPUs | split | median | one slab alone | first call | speedup | efficiency | vs {first.name} on 1 GPU | "
             "peak a GPU | PSNR vs 1 GPU (borders) | PSNR vs fp32 eager (borders) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, r in results.items():
        split = r["split"]
        where_split = f"{split['axis']}, slabs {split['latent_slabs']}" if split else "-"
        speedup = one["median_s"] / r["median_s"]
        vs_one = "-" if n == 1 else f"{psnr(r['video'], one['video']):.2f} dB ({border_psnr(r['video'], one['video'], split):.2f})"
        fp32_borders = border_psnr(r["video"], reference, split)
        vs_fp32 = f"{psnr(r['video'], reference):.2f} dB" + (f" ({fp32_borders:.2f})" if fp32_borders else "")
        slab_alone = f"{alone[n]:.3f} s" if n in alone else "-"
        lines.append(f"| {n} | {where_split} | {r['median_s']:.3f} s | {slab_alone} | {r['first_s']:.1f} s | {speedup:.2f}x | "
                     f"{speedup / n:.0%} | {first_one['median_s'] / r['median_s']:.2f}x | {max(r['peaks_gb']):.1f} GB | {vs_one} | {vs_fp32} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", default="1,2", help="the counts to measure, comma-separated (1 first)")
    p.add_argument("--preset", default="full")
    p.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--slab-alone", action="store_true", help="also time one slab alone on one GPU")
    p.add_argument("--per-call", action="store_true", help="each timed call, with when each rank's launches were queued and its collector's ms")
    p.add_argument("--freeze-gc", action="store_true", help="gc.freeze() on every rank after the first call")
    p.add_argument("--profile", type=Path, metavar="DIR", help="profile one more call of each count into DIR")
    p.add_argument("--candidate", type=Path, action="append",
                   help="the file measured (default: optimize.py); given more than once, each in turn on the same GPUs")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    counts = [int(n) for n in a.gpus.split(",")]
    candidates = a.candidate or [REPO / "targets" / "wan-vae" / "optimize.py"]
    if counts[0] != 1:
        raise SystemExit("multi_gpu: --gpus must start with 1 (the single-GPU decode everything is compared with)")
    if a.backend == "nccl" and max(counts) > torch.cuda.device_count():
        raise SystemExit(f"multi_gpu: {max(counts)} GPUs asked for, {torch.cuda.device_count()} here")
    goals = _common.load_goals()
    shape = list(goals["presets"][a.preset]["input_shape"])
    adapter = _common.load_adapter(goals)
    adapter.load_model("cpu")  # makes the synthetic-weights cache once, before the ranks read it
    with tempfile.TemporaryDirectory() as tmp:
        measured = {}  # candidate -> (results by count, one slab alone by count)
        for candidate in candidates:
            results = {n: run(n, a.backend, shape, a.runs, Path(tmp), candidate, a.profile, a.freeze_gc) for n in counts}
            alone = {}
            for n in counts[1:] if a.slab_alone else []:
                axis, sizes = choose_split(shape[-2], shape[-1], n)
                slab = list(shape)
                slab[axis] = max(sizes)
                alone[n] = run(1, a.backend, slab, a.runs, Path(tmp), candidate, freeze_gc=a.freeze_gc)["median_s"]
            measured[candidate] = results, alone
    device = device_of(0, a.backend)
    with torch.no_grad():
        reference = adapter.reference(adapter.load_model(device), adapter.make_input(shape, 1, device)).cpu()
    where = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
             if a.backend == "nccl" else f"CPU, torch {torch.__version__}, gloo")
    first_one = measured[candidates[0]][0][1]
    lines = []
    for candidate, (results, alone) in measured.items():
        heading = f"# {candidate.name} split across GPUs ({where}; preset {a.preset}, latent {shape}, " \
                  f"{adapter.weights_kind()} weights; {a.runs} timed calls after the first" \
                  f"{'; gc.freeze() after it' if a.freeze_gc else ''})"
        lines += [heading, ""] + candidate_table(results, alone, reference, first_one, candidates[0])
        lines += memory_table(results)
        if a.per_call:
            lines += per_call_table(results)
        lines.append("")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
