"""Run with TRITON_INTERPRET=1 (tests/test_fast_path.py does): every Triton kernel of a candidate
against its torch oracle, on CPU tensors. Usage: python tests/_fast_kernels_check.py CANDIDATE.py"""

from __future__ import annotations

import importlib.util
import sys

import torch

import _interpreter_patch_once  # noqa: F401  (this file's folder is on sys.path: run as a script)

spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
assert m._INTERPRET and m.triton is not None, "needs TRITON_INTERPRET=1 and triton"
g = torch.Generator().manual_seed(0)
CL = torch.channels_last_3d


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g).contiguous(memory_format=CL)


def close(name: str, a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> None:
    err = float((a - b).abs().max())
    assert err < tol, f"{name}: kernel differs from its torch oracle by {err}"
    print(f"{name}: ok ({err:.1e})")


c, t, h, w = 8, 3, 4, 5
gamma, bias = torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g)

# norm + SiLU, with and without the previous conv's bias, into a slice of a bigger buffer
x = rand(2, c, t, h, w)
for b in (None, bias):
    out_k, out_t = torch.zeros(2, c, t + 2, h, w).contiguous(memory_format=CL), torch.zeros(2, c, t, h, w)
    m.norm_silu(x, gamma, b, out_k[:, :, 2:])
    m.norm_silu_torch(x, gamma, b, out_t)
    close(f"norm_silu bias={b is not None}", out_k[:, :, 2:], out_t)

# residual sum, and with the next conv's normalized input written alongside
a, s = rand(2, c, t, h, w), rand(2, c, t, h, w)
ref = torch.empty(2, c, t, h, w)
m.residual_sum_torch(a, bias, s, ref)
close("residual_sum", m.residual_sum(a, bias, s), ref)
if "norm" in m.residual_sum.__code__.co_varnames:
    dest = torch.zeros(2, c, t + 2, h, w).contiguous(memory_format=CL)
    close("residual_sum (sum)", m.residual_sum(a, bias, s, (gamma, dest[:, :, 2:])), ref)
    want = torch.empty(2, c, t, h, w)
    m.norm_silu_torch(ref, gamma, None, want)
    close("residual_sum (normalized)", dest[:, :, 2:], want)
    if "keep_sum" in m.residual_sum.__code__.co_varnames:  # the sum itself not stored: only its normed copy
        dest.zero_()
        assert m.residual_sum(a, bias, s, (gamma, dest[:, :, 2:]), keep_sum=False) is None
        close("residual_sum (normed only)", dest[:, :, 2:], want)
    assert dest[:, :, :2].abs().max() == 0, "the history frames were overwritten"

# subpixel merge: time factor 1 and 2, first chunk or not, with and without the norm. The
# shortcut source has t / factor frames; a first chunk drops the first factor - 1 output frames.
for ft, first, tt in ((1, False, 3), (2, False, 4), (2, True, 3)):
    o = rand(2, 4 * c, tt, h, w)  # the phases on the small image's grid
    src = rand(2, 2 * c, (tt + ft - 1) // ft, h, w)
    want = torch.empty(2, c, tt, 2 * h, 2 * w)
    m.subpixel_merge_torch(o, bias, src, ft, first, want)
    close(f"subpixel_merge ft={ft} first={first}", m.subpixel_merge(o, bias, src, ft, first), want)
    if "norm" in m.subpixel_merge.__code__.co_varnames:
        dest = torch.zeros(2, c, tt + 2, 2 * h, 2 * w).contiguous(memory_format=CL)
        m.subpixel_merge(o, bias, src, ft, first, (gamma, dest[:, :, 2:]))
        normed = torch.empty_like(want)
        m.norm_silu_torch(want, gamma, None, normed)
        close(f"subpixel_merge ft={ft} first={first} (normalized)", dest[:, :, 2:], normed)
        assert dest[:, :, :2].abs().max() == 0, "the history frames were overwritten"
# The 720p decode's case: each program's rows lie in one row of the 2x image (64 channels, so 64 rows a
# program; 2 w = 128, two programs a row), where the kernel finds their frame and height once; and a
# shortcut whose repeat (16: 4 source channels) does not divide 4 FT, where the division is each element's.
for cc, hh, ww, ft, c_src, label in ((64, 2, 64, 2, 128, "in line"), (8, 4, 5, 2, 4, "repeat 16")):
    o, b_c = rand(1, 4 * cc, 3, hh, ww), torch.randn(cc, generator=g)
    src = rand(1, c_src, 2, hh, ww)
    want = torch.empty(1, cc, 3, 2 * hh, 2 * ww)
    m.subpixel_merge_torch(o, b_c, src, ft, True, want)
    close(f"subpixel_merge ({label})", m.subpixel_merge(o, b_c, src, ft, True), want)

# time upsample interleave and the head's unpatchify + clamp
if hasattr(m, "frames_from_channels_torch"):
    y, b2 = rand(2, 2 * c, t, h, w), torch.randn(2 * c, generator=g)
    want = torch.empty(2, c, 2 * t, h, w)
    m.frames_from_channels_torch(y, b2, want)
    close("frames_from_channels", m.frames_from_channels(y, b2), want)
if hasattr(m, "finish_torch"):
    if "taps" in m.finish_torch.__code__.co_varnames:
        # the head's three time taps per frame, channels-last rows of 48, summed over frames t..t+2
        head = (torch.randn(2 * (t + 2), 48, h, w, generator=g) * 2).contiguous(memory_format=torch.channels_last)
        head, label = head.view(2, t + 2, 48, h, w), "finish (head taps)"
    else:
        head, label = rand(2, 16, t, h, w) * 2, "finish"
    b12 = torch.randn(12, generator=g)
    # written into frames 1..t of a longer clip: the kernel must touch exactly its slice
    full_k, full_t = torch.zeros(2, 3, t + 4, 2 * h, 2 * w), torch.zeros(2, 3, t + 4, 2 * h, 2 * w)
    m.finish(head, b12, full_k[:, :, 1:1 + t])
    m.finish_torch(head, b12, full_t[:, :, 1:1 + t])
    close(label, full_k, full_t)
# Winograd convs against F.conv3d (fp32 operands: exact up to rounding): odd sizes (7x8: 2x2 tiles
# of 6x6, the last row and column partly outside), batch 2 in the first case, and a pass split into one-frame GEMMs
# by a small buffer cap, or into steps of 2 + 1 frames (V for 2 + 2 input frames of the 4x6 image's tiles; the last step on a prefix
# of the reused V). The transforms' coefficients (up to 21/4 and 32 in F(6x6)) amplify fp32 rounding
# to ~3e-5 of outputs of size ~3 here; a wrong tap, tile or index is off by O(1).
if hasattr(m, "winograd_conv"):
    two_frame_steps = (2 + 2) * m.POINTS * -(-4 // m.TILE) * -(-6 // m.TILE) * 64 * 4
    # Few tiles: a step's output frames share GEMMs of at most `rows` rows (4 tiles a frame here): one
    # group of 3, groups of 3 + 2 and of 2 + 2 + 1 (a group after the step's first frame, a partial
    # last one, more output channels than input); few=0: one GEMM a frame (one GPU's decode).
    cases = ((1 << 30, 64, 512, (64, 3, 7, 8)), (1 << 30, 64, 12, (64, 5, 7, 8)), (1 << 30, 64, 8, (128, 5, 5, 7)),
             (1 << 30, 0, 512, (128, 2, 5, 7)), (1, 64, 512, (64, 3, 4, 6)), (two_frame_steps, 64, 512, (64, 3, 4, 6)))
    for i, (cap, few, rows, (co, tt, hh, ww)) in enumerate(cases):
        m.WINOGRAD_BYTES = cap
        if hasattr(m, "WINOGRAD_FEW_TILES"):
            m.WINOGRAD_FEW_TILES, m.WINOGRAD_GEMM_ROWS = few, rows
        buf = rand(2 if i == 0 else 1, 64, tt + 2, hh, ww)  # two latents once (the conv's loop over them)
        wt = torch.randn(co, 64, 3, 3, 3, generator=g) / 40
        want = torch.nn.functional.conv3d(buf, wt, padding=(0, 1, 1))
        close(f"winograd_conv {co}x{hh}x{ww}x{tt} cap={cap} few={few} rows={rows}", m.winograd_conv(buf, *m.winograd_weight(wt, torch.float32)), want,
              tol=2e-4)
        if "history" in m.winograd_conv.__code__.co_varnames:  # the history frames read where they are kept
            history = buf[:, :, :2].clone(memory_format=CL)
            close(f"winograd_conv {co}x{hh}x{ww}x{tt} cap={cap} few={few} rows={rows} (history apart)",
                  m.winograd_conv(buf[:, :, 2:], *m.winograd_weight(wt, torch.float32), history), want, tol=2e-4)
    # Two input channel blocks of the shipped 64 and three blocks of tiles (13x13: 9 tiles, 4 a program): a
    # program's channel block and tile block both come from its launch index.
    m.WINOGRAD_BYTES, m.WINOGRAD_FEW_TILES, m.WINOGRAD_GEMM_ROWS = 1 << 30, 64, 512
    buf, wt = rand(1, 128, 5, 13, 13), torch.randn(64, 128, 3, 3, 3, generator=g) / 56
    close("winograd_conv 128 input channels", m.winograd_conv(buf, *m.winograd_weight(wt, torch.float32)),
          torch.nn.functional.conv3d(buf, wt, padding=(0, 1, 1)), tol=2e-4)
# The sub-pixel upsampling's phase convs as Winograd F(7x7, 2x2) against F.conv3d with the phase kernels,
# each phase shifted onto the small image's grid (phases_on_grid: the rows and columns it drops are
# the ones a shift misplaces): 7x7 tiles sticking out of the (h + 1) x (w + 1) output, four output-channel
# blocks of the shipped 64; one GEMM a frame (many tiles: few=0), a step's frames in one GEMM (few
# tiles: all 3 frames, or 2 + 1 where a GEMM takes at most 4 rows, 2 tiles' of 2 frames; and 3 frames of
# 2 x 3 tiles, so that a wrong (tile, frame) row order shows), and one frame a step (a buffer cap).
if hasattr(m, "subpixel_phase_conv"):
    m.WINOGRAD_FEW_TILES, m.WINOGRAD_GEMM_ROWS = 64, 512
    for cap, few, rows, (tt, hh, ww) in ((1 << 30, 0, 512, (3, 6, 9)), (1 << 30, 64, 512, (3, 6, 9)),
                                         (1 << 30, 64, 4, (3, 6, 9)), (1, 64, 512, (2, 7, 4)),
                                         (1 << 30, 64, 512, (3, 13, 15))):
        m.WINOGRAD_BYTES, m.WINOGRAD_FEW_TILES, m.WINOGRAD_GEMM_ROWS = cap, few, rows
        y = rand(1, 64, tt, hh, ww)
        phases = m._subpixel_weight(torch.randn(64, 64, 3, 3, generator=g).double() / 24)
        want = m.phases_on_grid(torch.nn.functional.conv3d(y.double(), phases.unsqueeze(2), padding=(0, 1, 1))).float()
        close(f"subpixel_phase_conv {tt}x{hh}x{ww} cap={cap} few={few} rows={rows}",
              m.winograd_conv(y, *m.subpixel_winograd_weight(phases, torch.float32), phases=True), want, tol=2e-4)
# Winograd weights made by the kernel at each call (WinogradWeight with nothing kept) against the
# float64 transform kept at build, odd channel counts (a partial block of output channels). Few
# input channels: a program makes one input channel's rows alone (the interpreter ~0.08 s each).
if hasattr(m, "WinogradWeight"):
    for co, ci in ((64, 6), (130, 5)):
        wt = torch.randn(co, ci, 3, 3, 3, generator=g) / 40
        m.WINOGRAD_KEPT_U_BYTES = 1 << 30
        kept = m.WinogradWeight(wt, torch.float32)
        m.WINOGRAD_KEPT_U_BYTES = 0
        made = m.WinogradWeight(wt, torch.float32)
        assert made.kept is None and kept.kept is not None
        close(f"winograd weight made per call {co}x{ci}", made.u(), kept.u(), tol=1e-5)
    # In fp16, as on the GPU: the kernel's fp32 sums and the float64 ones round to the same fp16
    # value or to its neighbour (U is scaled into [1, 2), where fp16's step is 2^-10).
    m.WINOGRAD_KEPT_U_BYTES = 1 << 30
    kept = m.WinogradWeight(wt, torch.float16)
    m.WINOGRAD_KEPT_U_BYTES = 0
    made = m.WinogradWeight(wt, torch.float16)
    close("winograd weight made per call, fp16", made.u().float(), kept.u().float(), tol=2 ** -10 + 1e-6)
# The phase convs' Winograd weights made by the kernel at each call (WinogradWeight(phases=True) with
# nothing kept) against the float64 transform kept at build: a partial block of output channels; in fp16
# to the step.
if hasattr(m, "subpixel_winograd_weight"):
    phases = m._subpixel_weight(torch.randn(33, 5, 3, 3, generator=g).double() / 8)  # 132 phase channels
    # fp16: one step at U's largest entries (scaled into [2^L, 2^(L + 1)), L = SUBPIXEL_U_MAX_LOG2).
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2.0 ** (m.SUBPIXEL_U_MAX_LOG2 - 10) + 1e-7)):
        m.WINOGRAD_KEPT_U_BYTES = 1 << 30
        kept = m.WinogradWeight(phases, dtype, phases=True)
        m.WINOGRAD_KEPT_U_BYTES = 0
        made = m.WinogradWeight(phases, dtype, phases=True)
        assert made.kept is None and kept.kept is not None
        close(f"subpixel weight made per call, {dtype}", made.u().float(), kept.u().float(), tol=tol)
    # U made in float64 a block of output channels at a time: the same U whatever the block.
    close("subpixel weight in blocks of 50 output channels", m.subpixel_winograd_weight(phases, torch.float32, block=50)[0],
          m.subpixel_winograd_weight(phases, torch.float32)[0], tol=1e-12)
    if "block" in m.winograd_weight.__code__.co_varnames:
        wt = torch.randn(130, 5, 3, 3, 3, generator=g) / 40
        whole, blocks = m.winograd_weight(wt, torch.float64, block=1 << 20), m.winograd_weight(wt, torch.float64, block=50)
        assert whole[1] == blocks[1], "the scale depends on the block"
        close("winograd weight in blocks of 50 output channels", blocks[0], whole[0], tol=1e-12)
print("all kernels match")
