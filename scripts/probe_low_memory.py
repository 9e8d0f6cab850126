"""Development probe (GPU): the drop-in decoder (integrations.wan_dropin.OptimizedDecoder over
optimize.py) with its default and its low_memory=True setting, at 720p x 121 and 480p x 81, on the
synthetic weights in one process: first call, median of 3, peak GPU memory (the frozen fp32 model
included), PSNR against the fp32 eager decode (PyTorch defaults).

    python scripts/probe_low_memory.py
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from harness import target
target.use("wan-vae")  # the worked example's packages by name (harness/target/)
from _probe import preset_shape
from integrations.wan_dropin import OptimizedDecoder
from model import load_vae

PRESETS = {"720p": "full", "480p": "480p"}  # goals.json presets: 121 / 81 frames


def main() -> int:
    vae = load_vae("synthetic", device="cuda")
    for name, preset in PRESETS.items():
        z = torch.randn(*preset_shape(preset), generator=torch.Generator().manual_seed(2026)).cuda()
        with torch.no_grad():
            reference = vae.decode(z).cpu()
        for low_memory in (False, True):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            decode = OptimizedDecoder(vae, low_memory=low_memory)
            times = []
            for _ in range(4):
                torch.cuda.synchronize()
                start = time.perf_counter()
                video = decode(z)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            psnr = 10 * torch.log10(4 / ((video.cpu() - reference) ** 2).mean()).item()
            print(f"{name} low_memory={low_memory}: first {times[0]:.1f} s, median {statistics.median(times[1:]):.3f} s, "
                  f"peak {torch.cuda.max_memory_allocated() / 1e9:.1f} GB (frozen fp32 model included), "
                  f"PSNR {psnr:.1f} dB vs fp32 eager", flush=True)
            del decode, video
    return 0


if __name__ == "__main__":
    sys.exit(main())
