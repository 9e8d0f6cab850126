"""The peers side by side in one process: diffusers' AutoencoderKLWan decode in fp32 and in bf16
(eager), fastvae (PyPI) on the bf16 module, and ours through the diffusers drop-in
(`integrations.wan_dropin.patch_diffusers_wan`), all on the same weights and the same latent.

    python scripts/peers.py [--shapes 720p 480p] [--runs 3] [--out FILE.md] [--free-gb 24]

For each decoder and shape: the first call in this process (Triton compiles, cuDNN's algorithm
search; an empty Triton cache unless an earlier process left one), the median of `--runs` timed
calls after it, the peak GPU memory of that decoder alone (its module built after the previous one
was freed, so the peak counts its own weights, its working set and the video), and the PSNR
against diffusers' fp32 decode (PyTorch defaults, TF32 convolutions). The weights are the seeded
synthetic ones (model.load_vae("synthetic")), mapped into diffusers' key names; the latent is a
seeded normal draw. A peer that is not installed is skipped with a line that says so; diffusers is
needed for every row. --free-gb N: every decoder but the fp32 reference runs with only N GB of
the GPU free (the rest held by this process: harness/measure/memory_limit.py's ballast), as on a card of
that size, its weights included; one that runs out of memory gets a row that says so. Development
tool: nothing here is part of the frozen harness.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parent.parent
from harness import target
target.use("wan-vae")  # the worked example's packages by name (harness/target/)
from _probe import preset_shape
from harness.measure.ballast import Ballast
from harness.measure.memory_limit import gb_argument
from integrations import wan_dropin
from model import LATENT_MEAN, LATENT_STD, load_vae

PRESETS = {"720p": "full", "480p": "480p"}  # goals.json presets: 121 / 81 frames


@dataclass
class Row:
    decoder: str
    shape: str
    median_s: float
    first_s: float
    peak_gb: float
    psnr_db: float | None
    note: str = ""


def diffusers_vae(state: dict[str, torch.Tensor], dtype: torch.dtype, device: str = "cuda"):
    """A diffusers AutoencoderKLWan (Wan 2.2 configuration) holding our weights, on the device."""
    import diffusers

    with torch.device("meta"):
        vae = diffusers.AutoencoderKLWan(
            base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True, patch_size=2, in_channels=12,
            out_channels=12, scale_factor_temporal=4, scale_factor_spatial=16,
            latents_mean=list(LATENT_MEAN), latents_std=list(LATENT_STD))
    ours_name = wan_dropin.diffusers_to_ours({k: k for k in vae.state_dict()})
    vae.load_state_dict({d: state[o].to(device, dtype) for o, d in ours_name.items()}, strict=True, assign=True)
    return vae.eval().requires_grad_(False)


def measure(name: str, shape: str, make: Callable[[], Callable[[torch.Tensor], torch.Tensor]],
            latent: torch.Tensor, runs: int, reference: torch.Tensor | None,
            free_gb: float | None = None) -> tuple[Row, torch.Tensor | None]:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    try:
        with Ballast(1, free_gb) if free_gb is not None else contextlib.nullcontext() as ballast:
            held = sum(t.numel() for t in ballast.held) if ballast else 0
            return _measure(name, shape, make, latent, runs, reference, held)
    except torch.OutOfMemoryError:
        print(f"{shape} {name}: out of memory with {free_gb:g} GB free", flush=True)
        return Row(name, shape, math.nan, math.nan, math.nan, None, f"out of memory in {free_gb:g} GB"), None


def _measure(name: str, shape: str, make: Callable[[], Callable[[torch.Tensor], torch.Tensor]],
             latent: torch.Tensor, runs: int, reference: torch.Tensor | None,
             ballast_bytes: int) -> tuple[Row, torch.Tensor]:
    decode = make()
    with torch.no_grad():
        torch.cuda.synchronize()
        t = time.perf_counter()
        video = decode(latent)
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        times = []
        for _ in range(runs):
            del video
            torch.cuda.synchronize()
            t = time.perf_counter()
            video = decode(latent)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    peak = (torch.cuda.max_memory_allocated() - ballast_bytes) / 1e9  # the decoder's own
    video = video.float().cpu()  # off the GPU: the next decoder's peak must not count it
    psnr = None
    if reference is not None:
        mse = float(((video - reference) ** 2).mean())
        psnr = 10 * torch.log10(torch.tensor(4.0 / mse)).item()  # the range [-1, 1] is 2 wide
    row = Row(name, shape, statistics.median(times), first, peak, psnr)
    print(f"{shape} {name}: median {row.median_s:.3f} s, first call {first:.1f} s, peak {peak:.1f} GB, "
          f"PSNR {'-' if psnr is None else f'{psnr:.1f} dB'}", flush=True)
    return row, video


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", choices=sorted(PRESETS), default=["720p", "480p"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--low-memory", action="store_true", help="also ours with the drop-in's low_memory=True")
    ap.add_argument("--only-ours", action="store_true", help="skip the peers but diffusers fp32 (the PSNR's reference)")
    ap.add_argument("--free-gb", type=gb_argument, help="run each decoder but the reference with only this many GB free")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("peers: needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        import diffusers  # noqa: F401
    except ImportError:
        print("peers: diffusers is not installed (pip install --no-deps diffusers); every row needs it", file=sys.stderr)
        return 2
    try:
        import fastvae
    except ImportError:
        fastvae = None
        print("peers: fastvae is not installed; its rows are skipped", file=sys.stderr)

    state = load_vae("synthetic").state_dict()
    mean = torch.tensor(LATENT_MEAN, device="cuda").view(1, -1, 1, 1, 1)
    std = torch.tensor(LATENT_STD, device="cuda").view(1, -1, 1, 1, 1)
    rows = []
    for shape in args.shapes:
        z = torch.randn(*preset_shape(PRESETS[shape]), generator=torch.Generator().manual_seed(2026)).cuda()
        raw = z * std + mean  # what a diffusers pipeline hands to vae.decode

        def eager(dtype: torch.dtype) -> Callable:
            vae = diffusers_vae(state, dtype)
            return lambda x: vae.decode(x.to(dtype)).sample

        def fast() -> Callable:
            vae = diffusers_vae(state, torch.bfloat16)
            fastvae.accelerate_vae(vae)
            return lambda x: vae.decode(x.bfloat16()).sample

        def ours(low_memory: bool = False) -> Callable:
            vae = wan_dropin.patch_diffusers_wan(diffusers_vae(state, torch.float32), low_memory=low_memory)
            return lambda x: vae.decode(x).sample

        row, reference = measure("diffusers fp32 eager", shape, lambda: eager(torch.float32), raw, args.runs, None)
        rows.append(row)
        candidates = [] if args.only_ours else [("diffusers bf16 eager", lambda: eager(torch.bfloat16))]
        if fastvae is not None and not args.only_ours:
            candidates.append((f"fastvae {fastvae.__version__}", fast))
        candidates.append(("ours (patch_diffusers_wan)", ours))
        if args.low_memory:
            candidates.append(("ours, low_memory=True", lambda: ours(low_memory=True)))
        for name, make in candidates:
            row, _ = measure(name, shape, make, raw, args.runs, reference, args.free_gb)
            rows.append(row)
        del reference

    versions = (f"{torch.cuda.get_device_name()}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
                f"cuDNN {torch.backends.cudnn.version()}, diffusers {diffusers.__version__}")
    limit = "" if args.free_gb is None else f"; every decoder but the fp32 reference with {args.free_gb:g} GB of the GPU free"
    lines = [f"Peers in one process ({versions}; synthetic weights, seeded latent, {args.runs} timed calls "
             f"after the first; PSNR against diffusers' fp32 decode{limit})", "",
             "| decoder | shape | median (s) | first call (s) | peak (GB) | PSNR (dB) | note |", "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.decoder} | {r.shape} | {r.median_s:.3f} | {r.first_s:.1f} | {r.peak_gb:.1f} | "
                     f"{'-' if r.psnr_db is None else f'{r.psnr_db:.1f}'} | {r.note} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
