"""Development probe (not part of the frozen harness): where a decode's peak GPU memory sits, and
what is alive at that moment, by the line of the candidate that allocated it.

    python scripts/probe_memory.py [--candidate optimize.py] [--min-channels 512 256] [--out FILE.md]

For each Winograd threshold (FastDecoder's winograd_min_channels) it decodes the benchmark shape
with synthetic weights once to warm up, then once under torch's allocator history
(torch.cuda.memory._record_memory_history), replays the allocations and frees, and at the
moment the most bytes were allocated lists the live blocks grouped by the candidate's line that
asked for them. Memory allocated before the recorded call (weights, the model, the input) is one
figure apart; the harness's peak also counts its own copies (its report, not this one, is the
bound's).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch
from _probe import benchmark_decode, load_module

ROOT = Path(__file__).resolve().parent.parent


def peak_breakdown(snapshot: dict, candidate: str) -> tuple[int, int, dict[str, int]]:
    """(peak bytes above the start, the event index of the peak, live bytes by allocating line)."""
    live: dict[int, tuple[int, str]] = {}
    total = peak = peak_at = 0
    best: dict[int, tuple[int, str]] = {}
    for i, ev in enumerate(snapshot["device_traces"][0]):
        if ev["action"] == "alloc":
            where = next((f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in ev.get("frames", [])
                          if f["filename"].endswith(candidate)), "elsewhere")
            live[ev["addr"]] = (ev["size"], where)
            total += ev["size"]
            if total > peak:
                peak, peak_at, best = total, i, dict(live)
        elif ev["action"] == "free_completed" and ev["addr"] in live:
            total -= live.pop(ev["addr"])[0]
    by_line: dict[str, int] = defaultdict(int)
    for size, where in best.values():
        by_line[where] += size
    return peak, peak_at, dict(sorted(by_line.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", default=str(ROOT / "targets" / "wan-vae" / "optimize.py"))
    ap.add_argument("--min-channels", type=int, nargs="+", help="default: the candidate's WINOGRAD_MIN_CHANNELS")
    ap.add_argument("--out")
    args = ap.parse_args()
    m = load_module(Path(args.candidate))
    torch.backends.cudnn.benchmark = True
    vae, z = benchmark_decode("cuda")
    lines = [f"# Peak memory probe ({torch.cuda.get_device_name()}, torch {torch.__version__}, synthetic weights, "
             "latent 1x48x31x44x80)", ""]
    for min_c in args.min_channels or [m.WINOGRAD_MIN_CHANNELS]:
        dec = m.FastDecoder(vae, torch.bfloat16, m.LATENT_FRAMES_PER_PASS, winograd_min_channels=min_c)
        dec(z)  # warm-up: cuDNN's search and Triton's compiles allocate too
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(stacks="python", max_entries=2_000_000)
        out = dec(z)
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        peak, at, by_line = peak_breakdown(snap, Path(args.candidate).name)
        lines += [f"## Winograd from {min_c} channels", "",
                  f"- allocated before the call (weights, the model, the input): {before / 1e9:.2f} GB",
                  f"- peak above that during the call: {peak / 1e9:.2f} GB (event {at}); torch's max_memory_allocated: "
                  f"{torch.cuda.max_memory_allocated() / 1e9:.2f} GB", "", "| allocated at | GB live at the peak |", "|---|---:|"]
        lines += [f"| {where} | {size / 1e9:.2f} |" for where, size in list(by_line.items())[:12]]
        lines.append("")
        print("\n".join(lines[-18:]), flush=True)
        del dec, out, snap
        torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
