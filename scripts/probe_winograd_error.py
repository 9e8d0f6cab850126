"""Development probe (CPU, no GPU needed): the numerical error of Winograd convolutions against the
direct bf16 conv the decoder runs on cuDNN, with the GPU's roundings emulated in float64 arithmetic.

    python scripts/probe_winograd_error.py

A 3x3 conv (padding 1) of a bf16 input (SiLU of a Gaussian, as after the decoder's norms) with
Gaussian weights, against the exact conv of the same input and the fp32 weights. Emulated:
- direct bf16: bf16 weights, exact products summed (fp32 accumulation), output rounded to bf16;
- Winograd F(m x m, 3x3): input and weight transforms in float64, both rounded to the GEMM's
  operand dtype (the weights scaled by a power of two first, as optimize.py does), the GEMM's
  output rounded to fp32, the output transform in float64, the output rounded to bf16.
The time taps of the decoder's 3x3x3 convs only lengthen the sums; they are left out.
F(2x2) cuts the multiply-adds 2.25x, F(4x4) 4x and F(6x6) (optimize.py's since session 17) 5.1x,
with larger transform coefficients as the tile grows (error grows). optimize.py writes the GEMM's
output M in fp16: the last column.

Then the sub-pixel upsampling's 2x2 phase convs (optimize.py's `_subpixel_weight`: nearest 2x
upsampling and a 3x3 conv as four 2x2 convs of the small image, padded by one) as Winograd
F(7x7, 2x2): an 8x8 patch a 7x7 tile, with the same eight points and so the same input transform
B^T as F(6x6, 3x3) (its G and A^T derived below from that B^T), 3.06x fewer multiply-adds than the
direct 2x2 conv (worked out in session 25; optimize.py's since e140, session 26).
"""

import torch
import torch.nn.functional as F

torch.manual_seed(0)
D = torch.float64
F2 = dict(BT=[[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]], G=[[1,0,0],[.5,.5,.5],[.5,-.5,.5],[0,0,1]], AT=[[1,1,1,0],[0,1,-1,-1]])
F4 = dict(BT=[[4,0,-5,0,1,0],[0,-4,-4,1,1,0],[0,4,-4,-1,1,0],[0,-2,-1,2,1,0],[0,2,-1,-2,1,0],[0,4,0,-5,0,1]],
          G=[[1/4,0,0],[-1/6,-1/6,-1/6],[-1/6,1/6,-1/6],[1/24,1/12,1/6],[1/24,-1/12,1/6],[0,0,1]],
          AT=[[1,1,1,1,1,0],[0,1,-1,2,-2,0],[0,1,1,4,4,0],[0,1,-1,8,-8,1]])
F6 = dict(BT=[[1,0,-21/4,0,21/4,0,-1,0],[0,1,1,-17/4,-17/4,1,1,0],[0,-1,1,17/4,-17/4,-1,1,0],
              [0,1/2,1/4,-5/2,-5/4,2,1,0],[0,-1/2,1/4,5/2,-5/4,-2,1,0],[0,2,4,-5/2,-5,1/2,1,0],
              [0,-2,4,5/2,-5,-1/2,1,0],[0,-1,0,21/4,0,-21/4,0,1]],
          G=[[1,0,0],[-2/9,-2/9,-2/9],[-2/9,2/9,-2/9],[1/90,1/45,2/45],[1/90,-1/45,2/45],
             [32/45,16/45,8/45],[32/45,-16/45,8/45],[0,0,1]],
          AT=[[1,1,1,1,1,1,1,0],[0,1,-1,2,-2,1/2,-1/2,0],[0,1,1,4,4,1/4,1/4,0],[0,1,-1,8,-8,1/8,-1/8,0],
              [0,1,1,16,16,1/16,1/16,0],[0,1,-1,32,-32,1/32,-1/32,1]])

def wino(x, w, mats, op_dtype, out_dtype=torch.bfloat16, m_dtype=torch.float32):
    """2D conv, padding 1: x [C, H, W] (values already bf16-representable), w [Co, C, r, r] ->
    [Co, H + 3 - r, W + 3 - r]."""
    BT, G, AT = (torch.tensor(mats[k], dtype=D) for k in ("BT", "G", "AT"))
    a = BT.shape[0]; m = AT.shape[0]; r = w.shape[-1]
    c, h, wd = x.shape
    ho, wo = h + 3 - r, wd + 3 - r  # the conv's output, padding 1
    th, tw = (ho + m - 1) // m, (wo + m - 1) // m
    xp = F.pad(x.to(D), (1, tw * m + r - 2 - wd, 1, th * m + r - 2 - h))
    patches = xp.unfold(1, a, m).unfold(2, a, m)  # C, th, tw, a, a
    V = torch.einsum("ij,cxyjk,lk->ilxyc", BT, patches, BT).reshape(a * a, th * tw, c)
    U = torch.einsum("ij,ocjk,lk->ilco", G, w.to(D), G).reshape(a * a, c, w.shape[0])
    scale = 2.0 ** -torch.floor(torch.log2(U.abs().max()))
    V, U = V.to(op_dtype).to(D), (U * scale).to(op_dtype).to(D)
    M = torch.bmm(V, U).to(m_dtype).to(D)  # fp32 accumulate, M stored as m_dtype
    M = M.reshape(a, a, th, tw, -1)
    Y = torch.einsum("ij,jkxyo,lk->oxiyl", AT, M, AT).reshape(-1, th * m, tw * m)[:, :ho, :wo] / scale
    return Y.to(out_dtype).to(D)

def direct_bf16(x, w):
    return F.conv2d(x.to(D)[None], w.to(torch.bfloat16).to(D), padding=1)[0].to(torch.bfloat16).to(D)

for c, co, h, w in ((1024, 1024, 24, 24), (512, 512, 24, 24)):
    x = F.silu(torch.randn(c, h, w, dtype=D) * 1.5).to(torch.bfloat16).to(D)  # the conv's bf16 input
    wt = torch.randn(co, c, 3, 3, dtype=D) / (9 * c) ** 0.5
    ref = F.conv2d(x[None], wt, padding=1)[0]
    err = lambda y: ((y - ref).norm() / ref.norm()).item()
    print(f"C {c} -> {co}: direct bf16 {err(direct_bf16(x, wt)):.2e} | F(2x2) fp16 {err(wino(x, wt, F2, torch.float16)):.2e}"
          f" | F(4x4) fp16 {err(wino(x, wt, F4, torch.float16)):.2e} | F(4x4) bf16 {err(wino(x, wt, F4, torch.bfloat16)):.2e}"
          f" | F(4x4) fp16, fp32 out {err(wino(x, wt, F4, torch.float16, torch.float32)):.2e}"
          f" | F(6x6) fp16 {err(wino(x, wt, F6, torch.float16)):.2e}"
          f" | F(4x4) / F(6x6) fp16, fp16 M {err(wino(x, wt, F4, torch.float16, m_dtype=torch.float16)):.2e}"
          f" / {err(wino(x, wt, F6, torch.float16, m_dtype=torch.float16)):.2e}")


def same_points(bt: list, r: int) -> dict:
    """F(n - r + 1, r) with the n points of the input transform bt (n x n): G and A^T solved from bt,
    so that A^T [(G g) * (bt d)] is the correlation of d with the r taps g. Column i of bt's inverse
    is point i's powers (a rank-1 table over output and tap indices): its factors are A^T's column i
    and G's row i (G's largest entry 1)."""
    inv = torch.linalg.inv(torch.tensor(bt, dtype=D))
    n = inv.shape[0]; m = n - r + 1
    G, AT = torch.zeros(n, r, dtype=D), torch.zeros(m, n, dtype=D)
    for i in range(n):
        u, s, vt = torch.linalg.svd(torch.stack([inv[k:k + r, i] for k in range(m)]))
        assert s[1] < 1e-9 * s[0], "not a Toom-Cook input transform"
        g, big = vt[0] * s[0], (vt[0] * s[0]).abs().max()
        G[i], AT[:, i] = g / big, u[:, 0] * big
    return dict(BT=bt, G=G.tolist(), AT=AT.tolist())


F7_2 = same_points(F6["BT"], 2)
x, wt = torch.randn(16, 13, 11, dtype=D), torch.randn(8, 16, 2, 2, dtype=D)
exact = (wino(x, wt, F7_2, D, D, D) - F.conv2d(x[None], wt, padding=1)[0]).abs().max().item()
print(f"F(7x7, 2x2) from F(6x6, 3x3)'s B^T, all in float64, 13x11 -> 14x12: max |winograd - conv2d| = {exact:.1e}")
for c, co, h, w in ((1024, 1024, 24, 24), (512, 512, 24, 24)):
    x = F.silu(torch.randn(c, h, w, dtype=D) * 1.5).to(torch.bfloat16).to(D)
    wt = torch.randn(co, c, 2, 2, dtype=D) / (4 * c) ** 0.5  # one phase's 2x2 kernel
    ref = F.conv2d(x[None], wt, padding=1)[0]
    err = lambda y: ((y - ref).norm() / ref.norm()).item()
    print(f"2x2 phase conv C {c} -> {co}: direct bf16 (cuDNN's conv, emulated) {err(direct_bf16(x, wt)):.2e} | "
          f"F(7x7, 2x2) fp16, fp16 M "
          f"{err(wino(x, wt, F7_2, torch.float16, m_dtype=torch.float16)):.2e} | F(7x7, 2x2) fp16, fp32 M "
          f"{err(wino(x, wt, F7_2, torch.float16)):.2e}")
