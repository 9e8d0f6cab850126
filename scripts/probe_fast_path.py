"""Development probe (not part of the frozen harness): time optimize.py's decoder against bf16
eager on one device in one process, check its PSNR, and break its GPU time down by kernel.

    python scripts/probe_fast_path.py [--shape 1 48 31 44 80] [--runs 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _probe import psnr, wall_times

from harness import target
target.use("wan-vae")  # the worked example's packages by name (harness/target/)
from model import load_vae


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs=5, default=[1, 48, 31, 44, 80])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--frames", type=int, nargs="*", default=[5])
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    out_dir = Path(args.out)
    facts = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
             "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "shape": args.shape}
    t = time.time()
    vae = load_vae("synthetic", device="cuda")
    facts["load_s"] = time.time() - t
    z = torch.randn(*args.shape, generator=torch.Generator().manual_seed(1234)).cuda()

    ref, tt = wall_times(lambda: vae.decode(z), 1)  # fp32 with PyTorch defaults (cuDNN TF32 on)
    facts["fp32_default_s"] = tt[0]
    vae_bf16 = load_vae("synthetic", device="cuda", dtype=torch.bfloat16)
    bf, tt = wall_times(lambda: vae_bf16.decode(z.bfloat16()), 2)
    facts["bf16_eager_s"] = tt
    facts["bf16_eager_psnr_vs_fp32"] = psnr(bf, ref)
    del vae_bf16, bf
    torch.cuda.empty_cache()

    import optimize
    for k in args.frames:
        optimize.LATENT_FRAMES_PER_PASS = k
        torch.cuda.reset_peak_memory_stats()
        t = time.time()
        fn, info = optimize.build_decoder(vae, z)
        _, warm = wall_times(lambda: fn(z), 2)
        facts[f"fast{k}_build_s"] = time.time() - t
        facts[f"fast{k}_warm_s"] = warm
        out, tt = wall_times(lambda: fn(z), args.runs)
        facts[f"fast{k}_s"] = tt
        facts[f"fast{k}_peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
        facts[f"fast{k}_psnr_vs_fp32"] = psnr(out, ref)
        print(json.dumps(facts), flush=True)

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn(z)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=90)
    (out_dir / "probe_profile.txt").write_text(table)
    print(table[:6000])
    print(json.dumps(facts))
    (out_dir / "probe.json").write_text(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
