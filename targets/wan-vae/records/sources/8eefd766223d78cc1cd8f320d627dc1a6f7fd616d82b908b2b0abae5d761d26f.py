"""The one file the optimizing agent edits.

Contract (harness/verify.py enforces it):
    build_decoder(vae, example_latent) -> (forward_fn, info)
    - vae: the frozen model from model.load_vae (fp32, on the benchmark device). You may read or
      copy its weights; the harness keeps its own pristine copy for the reference.
    - example_latent: a latent of the benchmark shape, for shape-specialized setup (compile,
      buffers). Never read its values or special-case it.
    - forward_fn(z) must return what vae.decode(z) returns, fp32 [B, 3, 1 + 4 (T - 1), 16 h, 16 w]
      in [-1, 1], for ANY latent of the example's shape; it must not modify z, keep outputs
      between calls, or leave work unsynchronized on a side stream.
    - info: a dict describing the configuration (dtype, compile mode, ...), recorded with the result.

This version: a re-implementation of the streaming decode for speed, same semantics.
- bf16 weights and activations (fp32 statistics in the norms), channels_last_3d end to end, so
  cuDNN runs its fast NDHWC kernels with no layout round trips.
- After the first latent frame (which upstream treats specially), several latent frames per pass.
- Each causal conv's input is built by one fused kernel: bias of the previous conv + RMS norm +
  SiLU, written after the two history frames (no separate pad, clone or cat passes); the spatial
  padding happens inside the convolution; conv biases ride along in the next fused kernel.
- Where a residual sum or an upsample's merge feeds a norm + conv, the kernel that makes the sum
  also writes the normalized copy into that conv's input buffer (one fewer read of the sum).
- The time upsample's frame interleave and the head's unpatchify + clamp are one kernel each.
- The head conv (256 -> 12 channels, 3x3x3) is one 2D conv over all frames with its three time
  taps stacked on 48 output channels; the epilogue kernel sums the taps of frames t, t+1, t+2.
  Twelve output channels leave cuDNN's conv3d tiles mostly idle (115 TFLOP/s); the 2D form took
  2.3 ms instead of 5.2 ms a pass in the conv probe.
- Nearest 2x upsample followed by a 3x3 conv is computed as four 2x2 convs on the small image
  (one conv with 4x the output channels), 2.25x fewer FLOPs; the pixel shuffle, bias and the
  duplicating-up shortcut are one fused kernel.
- The pointwise pieces are hand-written Triton kernels on CUDA; on CPU the same code runs eagerly
  in fp32 with torch ops (so the chunking and cache logic is testable without a GPU).
- 3 latent frames a pass: as fast as 5 (cuDNN's rate is flat beyond that), with a far shorter
  cudnn.benchmark warm-up on the first call and less memory.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from torch import Tensor

CL = torch.channels_last_3d
LATENT_FRAMES_PER_PASS = 3
HISTORY = 2


# --------------------------------------------------------------------------- fused pointwise
# Each fused step has a plain torch version (the CPU path, and the oracle in tests) and, on
# CUDA, a Triton kernel that does it in one pass over channels-last memory, where a pixel's
# channels are contiguous: an activation is a [pixels, C] matrix.

def norm_silu_torch(x: Tensor, gamma: Tensor, bias: Tensor | None, out: Tensor) -> None:
    """out = SiLU(RMS-norm over channels(x + bias)), fp32 statistics; gamma holds sqrt(C)."""
    y = x.float()
    if bias is not None:
        y = y + bias.view(1, -1, 1, 1, 1)
    inv = torch.rsqrt(torch.clamp((y * y).sum(1, keepdim=True), min=1e-24))  # F.normalize's eps
    out.copy_(F.silu(y * inv * gamma.view(1, -1, 1, 1, 1)))


def residual_sum_torch(conv_out: Tensor, bias: Tensor, skip: Tensor, out: Tensor) -> None:
    out.copy_(conv_out.float() + bias.view(1, -1, 1, 1, 1) + skip.float())


def frames_from_channels_torch(y: Tensor, bias: Tensor, out: Tensor) -> None:
    """Temporal upsampling: channel halves [C | C] at frame t become frames 2t and 2t + 1."""
    n, c2, t, h, w = y.shape
    y = y.float() + bias.view(1, -1, 1, 1, 1)
    out.copy_(y.view(n, 2, c2 // 2, t, h, w).permute(0, 2, 3, 1, 4, 5).reshape(n, c2 // 2, 2 * t, h, w))


def finish_torch(taps: Tensor, bias: Tensor, out: Tensor) -> None:
    """Head output from its per-tap 2D convs taps[n, frame, 3 x 16, h, w]: frame t is tap 0 of
    frame t + tap 1 of t + 1 + tap 2 of t + 2 (12 of 16 channels used), + bias; unpatchify 12
    channels into 3 x (2x2 pixels), clamp, into fp32 `out`."""
    n, tb, _, h, w = taps.shape
    taps = taps.float()
    y = taps[:, :-2, 0:12] + taps[:, 1:-1, 16:28] + taps[:, 2:, 32:44] + bias.view(1, 1, -1, 1, 1)
    y = y.view(n, tb - 2, 3, 2, 2, h, w).permute(0, 2, 1, 5, 4, 6, 3).reshape(n, 3, tb - 2, 2 * h, 2 * w)
    out.copy_(y.clamp_(-1, 1))


def dup_up(x: Tensor, out_channels: int, factor_t: int, first_chunk: bool) -> Tensor:
    """The parameter-free shortcut of an up block (channel repeat unfolded into t/h/w)."""
    n, c, t, h, w = x.shape
    r = out_channels * factor_t * 4 // c
    y = x.repeat_interleave(r, dim=1).view(n, out_channels, factor_t, 2, 2, t, h, w)
    y = y.permute(0, 1, 5, 2, 6, 3, 7, 4).reshape(n, out_channels, t * factor_t, 2 * h, 2 * w)
    return y[:, :, factor_t - 1:] if first_chunk else y


def subpixel_merge_torch(o: Tensor, bias: Tensor, src: Tensor, factor_t: int, first_chunk: bool,
                         out: Tensor) -> None:
    """out = the four phase outputs of the 2x2 convs interleaved into the 2x image + bias +
    dup_up(src)."""
    n, c4, t, h1, w1 = o.shape
    c, h, w = c4 // 4, h1 - 1, w1 - 1
    o = o.float().view(n, 2, 2, c, t, h1, w1)
    rows = [torch.stack([o[:, p, q, :, :, p:p + h, q:q + w] for q in (0, 1)], dim=-1) for p in (0, 1)]
    y = torch.stack(rows, dim=4).reshape(n, c, t, 2 * h, 2 * w)  # n c t h 2(p) w 2(q)
    out.copy_(y + bias.view(1, -1, 1, 1, 1) + dup_up(src.float(), c, factor_t, first_chunk))


# TRITON_INTERPRET=1 runs the kernels on CPU tensors too (slowly): how tests check them.
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the torch versions above are used
    triton = None

if triton is not None:

    @triton.jit
    def _norm_silu_kernel(x_ptr, bias_ptr, gamma_ptr, out_ptr, rows,
                          C: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_R: tl.constexpr):
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = tl.arange(0, C)
        mask = (r < rows)[:, None]
        offs = r.to(tl.int64)[:, None] * C + c[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            x += tl.load(bias_ptr + c)[None, :]
        inv = tl.rsqrt(tl.maximum(tl.sum(x * x, axis=1), 1e-24))
        y = x * inv[:, None] * tl.load(gamma_ptr + c)[None, :]
        y = y * tl.sigmoid(y)
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _store_norm_silu(y, gamma_ptr, normed_ptr, offs, mask, c):
        # The next conv's input from the stored (rounded) sum, exactly as norm_silu would make it.
        inv = tl.rsqrt(tl.maximum(tl.sum(y * y, axis=1), 1e-24))
        z = y * inv[:, None] * tl.load(gamma_ptr + c)[None, :]
        tl.store(normed_ptr + offs, (z * tl.sigmoid(z)).to(normed_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _residual_kernel(a_ptr, b_ptr, bias_ptr, out_ptr, gamma_ptr, normed_ptr, rows,
                         C: tl.constexpr, NORM: tl.constexpr, BLOCK_R: tl.constexpr):
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = tl.arange(0, C)
        mask = (r < rows)[:, None]
        offs = r.to(tl.int64)[:, None] * C + c[None, :]
        y = (tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
             + tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
             + tl.load(bias_ptr + c)[None, :])
        y = y.to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + offs, y, mask=mask)
        if NORM:
            _store_norm_silu(y.to(tl.float32), gamma_ptr, normed_ptr, offs, mask, c)

    @triton.jit
    def _subpixel_kernel(o_ptr, bias_ptr, src_ptr, out_ptr, gamma_ptr, normed_ptr, rows, H, W, C_SRC,
                         REPEATS, T_SHIFT, C: tl.constexpr, FT: tl.constexpr, NORM: tl.constexpr,
                         BLOCK_R: tl.constexpr):
        # One output pixel (t, 2i + p, 2j + q) a row; C channels a row.
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = tl.arange(0, C)
        mask = (r < rows)[:, None]
        r = r.to(tl.int64)
        xx = r % (2 * W)
        yy = (r // (2 * W)) % (2 * H)
        t = r // (4 * H * W)
        i, p, j, q = yy // 2, yy % 2, xx // 2, xx % 2
        o_row = (t * (H + 1) + i + p) * (W + 1) + j + q
        y = tl.load(o_ptr + o_row[:, None] * (4 * C) + ((2 * p + q) * C)[:, None] + c[None, :],
                    mask=mask, other=0.0).to(tl.float32)
        y += tl.load(bias_ptr + c)[None, :]
        ts = t + T_SHIFT
        k = c[None, :] * (FT * 4) + ((ts % FT) * 4 + p * 2 + q)[:, None]
        s_row = ((ts // FT) * H + i) * W + j
        y += tl.load(src_ptr + s_row[:, None] * C_SRC + k // REPEATS, mask=mask, other=0.0).to(tl.float32)
        y = y.to(out_ptr.dtype.element_ty)
        offs = r[:, None] * C + c[None, :]
        tl.store(out_ptr + offs, y, mask=mask)
        if NORM:
            _store_norm_silu(y.to(tl.float32), gamma_ptr, normed_ptr, offs, mask, c)

    @triton.jit
    def _frames_kernel(y_ptr, bias_ptr, out_ptr, rows, HW, C: tl.constexpr, BLOCK_R: tl.constexpr):
        # Output row (frame u, pixel) comes from input frame u // 2, channel half u % 2.
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = tl.arange(0, C)
        mask = (r < rows)[:, None]
        r = r.to(tl.int64)
        u, px = r // HW, r % HW
        half = ((u % 2) * C)[:, None] + c[None, :]
        y = tl.load(y_ptr + ((u // 2) * HW + px)[:, None] * (2 * C) + half, mask=mask, other=0.0).to(tl.float32)
        y += tl.load(bias_ptr + half)
        tl.store(out_ptr + r[:, None] * C + c[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _finish_kernel(taps_ptr, bias_ptr, out_ptr, rows, H, W, STRIDE_C, STRIDE_T, BLOCK_R: tl.constexpr):
        # Output row = head pixel (t, i, j), the sum of tap 0..2 of frames t..t+2 (48 channels a
        # pixel: 3 taps x 16); channel k = 4 c + 2 a + b lands on out[c, t, 2 i + b, 2 j + a].
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        k = tl.arange(0, 16)
        mask = (r < rows)[:, None] & (k < 12)[None, :]
        r = r.to(tl.int64)
        hw = H * W
        row0 = r[:, None] * 48 + k[None, :]  # frame t, tap 0; frame t + 1 is hw rows further
        y = tl.load(taps_ptr + row0, mask=mask, other=0.0).to(tl.float32)
        y += tl.load(taps_ptr + row0 + hw * 48 + 16, mask=mask, other=0.0).to(tl.float32)
        y += tl.load(taps_ptr + row0 + hw * 96 + 32, mask=mask, other=0.0).to(tl.float32)
        y = tl.minimum(tl.maximum(y + tl.load(bias_ptr + k, mask=k < 12, other=0.0)[None, :], -1.0), 1.0)
        j, i, t = r % W, (r // W) % H, r // (H * W)
        c, a, b = k // 4, (k // 2) % 2, k % 2
        offs = (c.to(tl.int64) * STRIDE_C)[None, :] + (t * STRIDE_T + 2 * i * (2 * W) + 2 * j)[:, None] \
            + (b * (2 * W) + a)[None, :]
        tl.store(out_ptr + offs, y, mask=mask)


def _rows_block(c: int) -> int:
    return max(1, 4096 // c)


def norm_silu(x: Tensor, gamma: Tensor, bias: Tensor | None, out: Tensor) -> None:
    if _on_torch(x):
        return norm_silu_torch(x, gamma, bias, out)
    x = x.contiguous(memory_format=CL)  # the kernel indexes channels-last rows (no-op on cuDNN outputs)
    for n in range(x.shape[0]):  # within one batch element, channels-last rows are contiguous
        xs, os_ = x[n], out[n]
        c = xs.shape[0]
        rows = xs.numel() // c
        blk = _rows_block(c)
        _norm_silu_kernel[(triton.cdiv(rows, blk),)](
            xs, bias if bias is not None else gamma, gamma, os_, rows,
            C=c, HAS_BIAS=bias is not None, BLOCK_R=blk, num_warps=4)


# A `norm` argument is (gamma, dest): also write SiLU(RMS-norm(result)) into dest, the frames
# after the history in the next causal conv's input buffer.


def _on_torch(t: Tensor) -> bool:
    """Torch ops instead of the kernels: on CPU (unless interpreting them), or without Triton."""
    return triton is None or (not t.is_cuda and not _INTERPRET)


def residual_sum(conv_out: Tensor, bias: Tensor, skip: Tensor, norm: tuple[Tensor, Tensor] | None = None) -> Tensor:
    out = torch.empty_like(conv_out, memory_format=CL)
    if _on_torch(conv_out):
        residual_sum_torch(conv_out, bias, skip, out)
        if norm is not None:
            norm_silu_torch(out, norm[0], None, norm[1])
        return out
    conv_out, skip = conv_out.contiguous(memory_format=CL), skip.contiguous(memory_format=CL)
    c = out.shape[1]
    for b in range(out.shape[0]):
        rows = out[b].numel() // c
        blk = _rows_block(c)
        # Without a norm the kernel still takes the two pointers; it never touches them.
        _residual_kernel[(triton.cdiv(rows, blk),)](
            conv_out[b], skip[b], bias, out[b], norm[0] if norm else bias, norm[1][b] if norm else out[b],
            rows, C=c, NORM=norm is not None, BLOCK_R=blk, num_warps=4)
    return out


def subpixel_merge(o: Tensor, bias: Tensor, src: Tensor, factor_t: int, first_chunk: bool,
                   norm: tuple[Tensor, Tensor] | None = None) -> Tensor:
    n, c4, t, h1, w1 = o.shape
    c = c4 // 4
    out = torch.empty(n, c, t, 2 * (h1 - 1), 2 * (w1 - 1), device=o.device, dtype=o.dtype,
                      memory_format=CL)
    if _on_torch(o):
        subpixel_merge_torch(o, bias, src, factor_t, first_chunk, out)
        if norm is not None:
            norm_silu_torch(out, norm[0], None, norm[1])
        return out
    o, src = o.contiguous(memory_format=CL), src.contiguous(memory_format=CL)
    c_src = src.shape[1]
    for b in range(n):
        rows = out[b].numel() // c
        blk = _rows_block(c)
        _subpixel_kernel[(triton.cdiv(rows, blk),)](
            o[b], bias, src[b], out[b], norm[0] if norm else bias, norm[1][b] if norm else out[b],
            rows, h1 - 1, w1 - 1, c_src, c * factor_t * 4 // c_src, factor_t - 1 if first_chunk else 0,
            C=c, FT=factor_t, NORM=norm is not None, BLOCK_R=blk, num_warps=4)
    return out


def frames_from_channels(y: Tensor, bias: Tensor) -> Tensor:
    n, c2, t, h, w = y.shape
    out = torch.empty(n, c2 // 2, 2 * t, h, w, device=y.device, dtype=y.dtype, memory_format=CL)
    if _on_torch(y):
        frames_from_channels_torch(y, bias, out)
        return out
    y = y.contiguous(memory_format=CL)
    for b in range(n):
        rows = out[b].numel() // (c2 // 2)
        blk = _rows_block(c2 // 2)
        _frames_kernel[(triton.cdiv(rows, blk),)](y[b], bias, out[b], rows, h * w, C=c2 // 2, BLOCK_R=blk,
                                                   num_warps=4)
    return out


def finish(taps: Tensor, bias: Tensor, out: Tensor) -> None:
    if _on_torch(taps):
        return finish_torch(taps, bias, out)
    n, tb, _, h, w = taps.shape
    for b in range(n):
        tb_rows = taps[b].permute(0, 2, 3, 1)  # frame, h, w, 48 channels: must be dense rows
        assert tb_rows.is_contiguous(), "the head taps must be channels-last"
        rows = (tb - 2) * h * w
        _finish_kernel[(triton.cdiv(rows, 256),)](
            taps[b], bias, out[b], rows, h, w, out.stride(1), out.stride(2), BLOCK_R=256, num_warps=4)


# --------------------------------------------------------------------------- weights
def _subpixel_weight(w: Tensor) -> Tensor:
    """3x3 conv after nearest 2x upsampling == per output phase (p, q) a 2x2 conv on the small
    image padded by one. Returns the four 2x2 kernels stacked on the output channels."""
    groups = ([[0], [1, 2]], [[0, 1], [2]])  # which 3x3 taps fold into each 2x2 tap, per phase
    phases = []
    for p in (0, 1):
        for q in (0, 1):
            k = torch.stack([
                torch.stack([w[:, :, groups[p][r]][:, :, :, groups[q][s]].sum((2, 3)) for s in (0, 1)], -1)
                for r in (0, 1)], -2)
            phases.append(k)
    return torch.cat(phases, 0)


class _Weights:
    """The frozen model's weights in the layout and dtype the fast path wants."""

    def __init__(self, vae, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.conv: dict[str, Tensor] = {}
        self.bias: dict[str, Tensor] = {}
        self.gamma: dict[str, Tensor] = {}
        for name, m in vae.named_modules():
            if not name.startswith("decoder."):
                continue
            if isinstance(m, torch.nn.Conv3d):
                self._add_conv(name, m.weight, m.bias)
            elif name.endswith("resample.1"):  # the 2D conv after nearest upsampling
                w = _subpixel_weight(m.weight.double()).unsqueeze(2)  # (4C, C, 1, 2, 2)
                self._add_conv(name, w, m.bias)
            elif hasattr(m, "gamma"):
                self.gamma[name] = (m.gamma.detach().float().flatten() * m.gamma.shape[0] ** 0.5)
        # The head as a 2D conv: 12 output channels padded to 16, the 3 time taps stacked (tap-major).
        w = F.pad(self.conv.pop("decoder.head.2"), (0, 0, 0, 0, 0, 0, 0, 0, 0, 4))
        self.head_taps = w.permute(2, 0, 1, 3, 4).flatten(0, 1).contiguous(memory_format=torch.channels_last)

    def _add_conv(self, name: str, w: Tensor, b: Tensor | None) -> None:
        self.conv[name] = w.detach().to(self.dtype).contiguous(memory_format=CL)
        if b is not None:  # added by the next fused kernel, never by the conv itself
            self.bias[name] = b.detach().float()


# --------------------------------------------------------------------------- the decoder
def _norm_consumers(vae) -> dict[str, tuple[str, str]]:
    """Block name -> (conv, gamma) of the norm + conv that reads the block's output, for the blocks
    followed by one (a residual block or the head). The producer writes that conv's input."""
    order = ["decoder.middle.0", "decoder.middle.1", "decoder.middle.2"]
    for i, stage in enumerate(vae.decoder.upsamples):
        order += [f"decoder.upsamples.{i}.upsamples.{j}" for j in range(len(stage.upsamples))]
    order.append("decoder.head")

    def first_norm(name: str) -> tuple[str, str] | None:
        if name == "decoder.head":
            return "decoder.head.2", "decoder.head.0"
        if hasattr(vae.get_submodule(name), "residual"):
            return f"{name}.residual.2", f"{name}.residual.0"
        return None

    return {a: first_norm(b) for a, b in zip(order, order[1:]) if first_norm(b)}


class FastDecoder:
    def __init__(self, vae, dtype: torch.dtype, frames_per_pass: int) -> None:
        self.vae = vae
        self.w = _Weights(vae, dtype)
        self.dtype = dtype
        self.frames_per_pass = frames_per_pass
        self.mean = vae.latent_mean.float().view(1, -1, 1, 1, 1)
        self.std = vae.latent_std.float().view(1, -1, 1, 1, 1)
        self.consumers = _norm_consumers(vae)

    def input_buffer(self, name: str, n: int, t: int, h: int, w: int) -> Tensor:
        """Conv `name`'s input buffer [two history frames | t new frames], the history filled in."""
        c = self.w.head_taps.shape[1] if name == "decoder.head.2" else self.w.conv[name].shape[1]
        buf = torch.empty(n, c, HISTORY + t, h, w, device=self.device, dtype=self.dtype, memory_format=CL)
        hist = self.hist.get(name)
        if hist is None:
            buf[:, :, :HISTORY].zero_()  # causal padding before the first frame
        else:
            buf[:, :, :HISTORY].copy_(hist)
        return buf

    def prefill_consumer_input(self, block: str, n: int, t: int, h: int, w: int) -> tuple[Tensor, Tensor] | None:
        """(gamma, destination) for a kernel that makes `block`'s output and can also write the
        normalized input of the conv that reads it; None when no norm + conv follows. Allocates
        that conv's input buffer now and leaves it in self.filled, where its causal() finds it."""
        if block not in self.consumers:
            return None
        conv, gamma = self.consumers[block]
        self.filled[conv] = buf = self.input_buffer(conv, n, t, h, w)
        return self.w.gamma[gamma], buf[:, :, HISTORY:]

    def causal(self, name: str, x: Tensor, gamma: str | None = None, pre_bias: str | None = None,
               pad_hw: int = 1) -> Tensor:
        """One causal conv over its input buffer (causal_input)."""
        return F.conv3d(self.causal_input(name, x, gamma, pre_bias), self.w.conv[name], None,
                        padding=(0, pad_hw, pad_hw))

    def causal_input(self, name: str, x: Tensor, gamma: str | None = None, pre_bias: str | None = None) -> Tensor:
        """A causal conv's input buffer [two history frames | f(x)], f = norm + SiLU (with the
        previous conv's bias) or identity, unless the kernel that made x filled it already; the
        history is kept under the layer's name."""
        buf = self.filled.pop(name, None)
        if buf is None:
            n, _, t, h, w = x.shape
            buf = self.input_buffer(name, n, t, h, w)
            if gamma is not None:
                norm_silu(x, self.w.gamma[gamma], self.w.bias[pre_bias] if pre_bias else None, buf[:, :, HISTORY:])
            else:
                buf[:, :, HISTORY:].copy_(x)
        self.hist[name] = buf[:, :, -HISTORY:].clone(memory_format=CL)
        return buf

    def head_taps(self, x: Tensor) -> Tensor:
        """The head conv's three time taps for every input frame: [n, frames + 2, 48, h, w]."""
        buf = self.causal_input("decoder.head.2", x, gamma="decoder.head.0")
        n, c, tb, h, w = buf.shape
        frames = buf.transpose(1, 2).reshape(n * tb, c, h, w)  # a view: channels_last_3d is (n, t, h, w, c)
        taps = F.conv2d(frames, self.w.head_taps, None, padding=1)
        return taps.view(n, tb, -1, h, w)

    def res_block(self, prefix: str, x: Tensor) -> Tensor:
        h = self.causal(f"{prefix}.residual.2", x, gamma=f"{prefix}.residual.0")
        h = self.causal(f"{prefix}.residual.6", h, gamma=f"{prefix}.residual.3", pre_bias=f"{prefix}.residual.2")
        bias = self.w.bias[f"{prefix}.residual.6"]
        sc = f"{prefix}.shortcut"
        if sc in self.w.conv:
            skip = F.conv3d(x, self.w.conv[sc])
            bias = bias + self.w.bias[sc]
        else:
            skip = x
        n, _, frames, height, width = h.shape
        return residual_sum(h, bias, skip, self.prefill_consumer_input(prefix, n, frames, height, width))

    def attention(self, prefix: str, x: Tensor) -> Tensor:
        blk = self.vae.get_submodule(prefix)
        n, c, t, h, w = x.shape
        seq = x.permute(0, 2, 3, 4, 1).reshape(n * t, h * w, c).float()
        seq = F.normalize(seq, dim=-1) * self.w.gamma[f"{prefix}.norm"]
        qkv = F.linear(seq.to(self.dtype), blk.to_qkv.weight.flatten(1).to(self.dtype),
                       blk.to_qkv.bias.to(self.dtype))
        q, k, v = qkv.unsqueeze(1).chunk(3, dim=-1)
        o = F.scaled_dot_product_attention(q, k, v).squeeze(1)
        o = F.linear(o, blk.proj.weight.flatten(1).to(self.dtype), blk.proj.bias.to(self.dtype))
        o = o.view(n, t, h, w, c).permute(0, 4, 1, 2, 3)
        return (x + o).contiguous(memory_format=CL)

    def up_block(self, i: int, x: Tensor, first_chunk: bool) -> Tensor:
        prefix = f"decoder.upsamples.{i}"
        blk = self.vae.get_submodule(prefix)
        y = x
        for j, layer in enumerate(blk.upsamples):
            name = f"{prefix}.upsamples.{j}"
            if hasattr(layer, "residual"):
                y = self.res_block(name, y)
                continue
            factor_t = 1
            if layer.mode == "upsample3d":
                factor_t = 2
                if self.chunk_index > 0:  # the first chunk is not doubled in time (upstream)
                    y = self.causal(f"{name}.time_conv", y, pad_hw=0)
                    y = frames_from_channels(y, self.w.bias[f"{name}.time_conv"])
            o = F.conv3d(y, self.w.conv[f"{name}.resample.1"], None, padding=(0, 1, 1))
            n, _, t, h1, w1 = o.shape
            norm = self.prefill_consumer_input(name, n, t, 2 * (h1 - 1), 2 * (w1 - 1))
            return subpixel_merge(o, self.w.bias[f"{name}.resample.1"], x, factor_t, first_chunk, norm)
        return y

    def decode_chunk(self, x: Tensor) -> Tensor:
        first = self.chunk_index == 0
        x = self.causal("decoder.conv1", x)
        x = self.res_block("decoder.middle.0", self._add_bias(x, "decoder.conv1"))
        x = self.attention("decoder.middle.1", x)
        x = self.res_block("decoder.middle.2", x)
        for i in range(len(self.vae.decoder.upsamples)):
            x = self.up_block(i, x, first)
        return self.head_taps(x)

    def _add_bias(self, x: Tensor, name: str) -> Tensor:
        return (x.float() + self.w.bias[name].view(1, -1, 1, 1, 1)).to(self.dtype).contiguous(memory_format=CL)

    @torch.no_grad()
    def __call__(self, z: Tensor) -> Tensor:
        n, _, t, h, w = z.shape
        # Un-normalize and the 1x1x1 conv2 are tiny: plain fp32 ops.
        x = F.conv3d(z.float() * self.std + self.mean, self.vae.conv2.weight.float(), self.vae.conv2.bias.float())
        x = x.to(self.dtype).contiguous(memory_format=CL)
        out = torch.empty(n, 3, 1 + 4 * (t - 1), 16 * h, 16 * w, device=z.device, dtype=torch.float32)
        self.device = z.device
        self.hist: dict[str, Tensor] = {}
        self.filled: dict[str, Tensor] = {}  # input buffers written ahead by a fused kernel
        starts = [0, *range(1, t, self.frames_per_pass)]
        frame = 0
        for self.chunk_index, s in enumerate(starts):
            e = 1 if s == 0 else min(s + self.frames_per_pass, t)
            taps = self.decode_chunk(x[:, :, s:e])
            frames = taps.shape[1] - HISTORY
            finish(taps, self.w.bias["decoder.head.2"], out[:, :, frame:frame + frames])
            frame += frames
        self.hist, self.filled = {}, {}  # nothing survives between calls
        return out


def build_decoder(vae, example_latent):
    cuda = example_latent.is_cuda
    if cuda:
        torch.backends.cudnn.benchmark = True
    dtype = torch.bfloat16 if cuda else torch.float32
    decoder = FastDecoder(vae, dtype, frames_per_pass=LATENT_FRAMES_PER_PASS)
    if not cuda:
        print("optimize.py: no CUDA; running the fast path eagerly in fp32", file=sys.stderr)
    info = {"dtype": str(dtype).replace("torch.", ""), "layout": "channels_last_3d",
            "kernels": "cuDNN convs + 5 Triton kernels" if cuda else "torch eager (CPU)", "head": "2D conv, stacked time taps",
            "latent_frames_per_pass": LATENT_FRAMES_PER_PASS, "upsample": "subpixel 2x2 convs"}
    return decoder, info
