"""Development probe (one CUDA GPU): a Winograd GEMM's time against its tiles, one GEMM an output
frame against one GEMM for several frames.

    python scripts/probe_winograd_few_tiles.py

optimize.py's Winograd conv multiplies, for each output frame, V's rows (a tile each, K = 3 C: the
three time taps read in place) by U [64 points, 3 C, Co]. With few tiles (a split rank's border
windows; a 2-GPU slab at the latent's size) the GEMM is bound by reading U (403 MB in fp16 for
1024 channels), once a frame. The other form copies the frames' rows end to end and reads U once
for all of them. Printed: microseconds per form and per frame, and the ratio, for C = Co = 1024
and 512, 8 to 224 tiles, 3 and 12 frames (session 23: the H200's figures are in
profiles/multi_gpu_h200x2_s23.md; optimize.py batches at most WINOGRAD_FEW_TILES = 64 tiles).
"""

import torch
from _probe import median_ms

POINTS = 64


def timed_us(fn) -> float:
    """Microseconds a call: the mean of 30 back-to-back calls after 3 warm-up ones (CUDA events)."""
    return median_ms(fn, trials=1, reps=30, warmup=3) * 1000


def main() -> None:
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__)
    for c in (1024, 512):
        u = torch.randn(POINTS, 3 * c, c, device="cuda", dtype=torch.float16)
        for tiles in (8, 16, 32, 56, 112, 224):
            for frames in (3, 12):
                frames_in = frames + 2  # the two history frames in front
                v = torch.randn(POINTS, tiles, frames_in, c, device="cuda", dtype=torch.float16)
                m_one = torch.empty(POINTS, tiles, c, device="cuda", dtype=torch.float16)
                m_all = torch.empty(POINTS, frames * tiles, c, device="cuda", dtype=torch.float16)
                a_all = torch.empty(POINTS, frames, tiles, 3 * c, device="cuda", dtype=torch.float16)

                def a_frame_each() -> None:
                    for j in range(frames):
                        a = v.as_strided((POINTS, tiles, 3 * c), (tiles * frames_in * c, frames_in * c, 1), j * c)
                        torch.bmm(a, u, out=m_one)

                def one_gemm() -> None:
                    a_all.copy_(v.as_strided((POINTS, frames, tiles, 3 * c), (tiles * frames_in * c, c, frames_in * c, 1)))
                    torch.bmm(a_all.view(POINTS, frames * tiles, 3 * c), u, out=m_all)

                each, one = timed_us(a_frame_each), timed_us(one_gemm)
                print(f"C={c} tiles={tiles:4d} frames={frames:2d}: a frame each {each:8.1f} us ({each / frames:6.1f} a frame)"
                      f"  one GEMM {one:8.1f} us ({one / frames:6.1f} a frame)  {each / one:4.2f}x")


if __name__ == "__main__":
    main()
