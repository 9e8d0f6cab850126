"""Development probe (not part of the frozen harness): the Winograd GEMM of one step, three ways.

    python scripts/probe_winograd_gemm.py [--out FILE.md]
    TRITON_INTERPRET=1 python scripts/probe_winograd_gemm.py --check   # CPU: the kernels' results

Each output frame's GEMM reads three input frames of V, so every V frame is read three times
(optimize.py's winograd_conv: one bmm over the transform points per output frame). At 256
channels that makes the GEMM memory-bound (~465 TFLOP/s in e101's profile). The ways timed here:

- frame: the shipped form, a bmm over the points per output frame;
- point: a bmm over the step's output frames per transform point (A's batch stride is one frame),
  so that consecutive batches share two of their three frames while they are in L2;
- triton-*: one Triton kernel for the whole step; a program walks the step's output frames for its
  rows and point ("loop": frame by frame inside the program, the two shared frames still in L2)
  or a program a frame with the frames of the same rows launched side by side ("grid").
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import triton
import triton.language as tl

from _probe import median_ms

# The Winograd tile the GEMMs are shaped for: F(4x4, 3x3)'s, optimize.py's when
# profiles/probe_winograd_gemm.md was measured (session 17, before e107); 6 for today's F(6x6).
TILE = 4
POINTS = (TILE + 2) ** 2  # transform points: the GEMM's batch

SHAPES = [  # (C, Co, output frames a step, H, W, output frames a decode) as the decode runs them
    (256, 256, 4, 352, 640, 600),
    (512, 256, 4, 352, 640, 120),
    (512, 512, 12, 176, 320, 600),
    (1024, 512, 12, 176, 320, 120),
    (1024, 1024, 6, 88, 160, 300),
    (1024, 1024, 3, 44, 80, 300),
]


@triton.jit
def _gemm_loop(v_ptr, u_ptr, m_ptr, tiles, frames_in, frames, CO, C: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # v: [POINTS, tiles, frames_in, C]; u: [POINTS, 3 C, CO]; m: [POINTS, frames x tiles, CO].
    # Output frame j's row `tile` is V[e, tile, j:j + 3] flattened: 3 C contiguous values.
    e = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    rmask = rows < tiles
    a_ptrs = v_ptr + ((e * tiles + rows).to(tl.int64) * frames_in * C)[:, None] + ks[None, :]
    b_ptrs = u_ptr + (e * 3 * C + ks).to(tl.int64)[:, None] * CO + cols[None, :]
    for j in range(frames):
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, 3 * C, BLOCK_K):
            a = tl.load(a_ptrs + j * C + k, mask=rmask[:, None], other=0.0)
            acc = tl.dot(a, tl.load(b_ptrs + k * CO), acc)
        m_offs = ((e * frames + j) * tiles + rows).to(tl.int64)[:, None] * CO + cols[None, :]
        tl.store(m_ptr + m_offs, acc.to(m_ptr.dtype.element_ty), mask=rmask[:, None])


@triton.jit
def _gemm_grid(v_ptr, u_ptr, m_ptr, tiles, frames_in, frames, CO, C: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # As _gemm_loop, but output frame j is the grid's fastest axis.
    j = tl.program_id(0)
    e = tl.program_id(2) // tl.cdiv(CO, BLOCK_N)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tl.program_id(2) % tl.cdiv(CO, BLOCK_N)) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    rmask = rows < tiles
    a_ptrs = v_ptr + ((e * tiles + rows).to(tl.int64) * frames_in * C + j * C)[:, None] + ks[None, :]
    b_ptrs = u_ptr + (e * 3 * C + ks).to(tl.int64)[:, None] * CO + cols[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, 3 * C, BLOCK_K):
        a = tl.load(a_ptrs + k, mask=rmask[:, None], other=0.0)
        acc = tl.dot(a, tl.load(b_ptrs + k * CO), acc)
    m_offs = ((e * frames + j) * tiles + rows).to(tl.int64)[:, None] * CO + cols[None, :]
    tl.store(m_ptr + m_offs, acc.to(m_ptr.dtype.element_ty), mask=rmask[:, None])


def by_frame(v, u, m, frames):
    _, tiles, frames_in, c = v.shape
    for j in range(frames):
        a = v.as_strided((POINTS, tiles, 3 * c), (tiles * frames_in * c, frames_in * c, 1), j * c)
        torch.bmm(a, u, out=m[:, j * tiles:(j + 1) * tiles])


def by_point(v, u, m, frames):
    _, tiles, frames_in, c = v.shape
    co = u.shape[2]
    for e in range(POINTS):
        a = v[e].as_strided((frames, tiles, 3 * c), (c, frames_in * c, 1), v[e].storage_offset())
        torch.bmm(a, u[e].expand(frames, 3 * c, co), out=m[e].view(frames, tiles, co))


def triton_way(kernel, bm, bn, bk, warps, stages):
    def run(v, u, m, frames):
        _, tiles, frames_in, c = v.shape
        co = u.shape[2]
        if kernel is _gemm_loop:
            grid = (triton.cdiv(tiles, bm), POINTS, co // bn)
        else:
            grid = (frames, triton.cdiv(tiles, bm), POINTS * (co // bn))
        kernel[grid](v, u, m, tiles, frames_in, frames, co, C=c, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                     num_warps=warps, num_stages=stages)
    return run


WAYS = {"frame": by_frame, "point": by_point}
for bm, bn, bk, warps, stages in [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
                                  (256, 128, 64, 8, 3), (64, 256, 64, 4, 4)]:
    WAYS[f"triton-loop {bm}x{bn}x{bk} w{warps} s{stages}"] = triton_way(_gemm_loop, bm, bn, bk, warps, stages)
    WAYS[f"triton-grid {bm}x{bn}x{bk} w{warps} s{stages}"] = triton_way(_gemm_grid, bm, bn, bk, warps, stages)


def operands(c, co, frames, h, w, device, dtype):
    g = torch.Generator(device="cpu").manual_seed(0)
    tiles = -(-h // TILE) * -(-w // TILE)
    v = torch.randn(POINTS, tiles, frames + 2, c, generator=g).to(device, dtype)
    u = (torch.randn(POINTS, 3 * c, co, generator=g) / (3 * c) ** 0.5).to(device, dtype)
    return v, u, torch.empty(POINTS, frames * tiles, co, device=device, dtype=dtype)


def check() -> None:
    """Every way against an fp32 reference on a small shape (TRITON_INTERPRET=1 on the CPU)."""
    v, u, m = operands(64, 256, 3, 12, 40, "cpu", torch.float32)
    ref = torch.empty_like(m)
    by_frame(v, u, ref, 3)
    for name, way in WAYS.items():
        mm = torch.zeros_like(m, dtype=torch.float16 if "triton" in name else m.dtype)
        way(v.to(mm.dtype), u.to(mm.dtype), mm, 3)
        err = ((mm.float() - ref).abs().max() / ref.abs().max()).item()
        print(f"check {name}: max rel err {err:.2e}")
        assert err < 1e-2, (name, err)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.check:
        check()
        return
    dev = torch.device("cuda")
    lines = [f"# Winograd GEMM of one step, three ways ({torch.cuda.get_device_name()}, torch "
             f"{torch.__version__}, Triton {triton.__version__})", "",
             "ms for one step's GEMMs (median of 15, CUDA events); TFLOP/s; decode-wide ms "
             "(output frames a decode / frames a step x the step's time); max rel. diff against 'frame'.", "",
             "| C -> Co, frames, HxW | way | ms | TFLOP/s | decode ms | max rel diff |", "|---|---|---:|---:|---:|---:|"]
    totals: dict[str, float] = {}
    for c, co, frames, h, w, per_decode in SHAPES:
        v, u, m = operands(c, co, frames, h, w, dev, torch.float16)
        ref = torch.empty_like(m)
        by_frame(v, u, ref, frames)
        flops = 2 * POINTS * m.shape[1] * 3 * c * co
        for name, way in WAYS.items():
            m.zero_()
            try:
                way(v, u, m, frames)
                ms = median_ms(lambda: way(v, u, m, frames), trials=15, warmup=2)
            except Exception as exc:  # a block shape the compiler refuses: say so, go on
                lines.append(f"| {c}->{co}, {frames}, {h}x{w} | {name} | failed: {type(exc).__name__} | | | |")
                print(lines[-1], flush=True)
                continue
            diff = ((m.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            decode_ms = ms * per_decode / frames
            totals[name] = totals.get(name, 0.0) + decode_ms
            lines.append(f"| {c}->{co}, {frames}, {h}x{w} | {name} | {ms:.3f} | {flops / ms / 1e9:.0f} | "
                         f"{decode_ms:.1f} | {diff:.1e} |")
            print(lines[-1], flush=True)
    lines += ["", "| way | decode ms, all shapes |", "|---|---:|"]
    lines += [f"| {name} | {t:.1f} |" for name, t in sorted(totals.items(), key=lambda kv: kv[1])]
    print("\n".join(lines[-len(totals) - 2:]))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
