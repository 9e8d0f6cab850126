"""Make the variant of optimize.py whose Winograd input transform walks its patch's 8 columns in a loop
the compiler keeps (a runtime `range`), not unrolled: a cold first call waits ~5 s for that kernel's compile
(profiles/first_call_e184_h200_s36.md), 70% of it Triton's coalescing pass, whose cost grows with the
kernel's memory operations and the operations joined to them (64 loads and 64 stores, all one slice).
In the loop the compiler sees one column's 8 loads; the row transform (along the columns) becomes 64
running sums V[a][b] += T[a][j] * B^T[b][j], their coefficients picked by j; the 64 stores stay.

    python3 targets/wan-vae/plans/session36/looped_input_transform.py SRC OUT [COLUMNS_A_STEP]   # 1 (default), 2 or 4
"""

import runpy
import sys
from pathlib import Path

write_variant = runpy.run_path(str(Path(__file__).resolve().parent.parent / "_edits.py"))["write_variant"]

OLD_HEAD = """        # aI, bI, ... hI: row I of B^T d in patch columns 0..7
        a0, a1, a2, a3, a4, a5, a6, a7 = _load_col(d_ptrs, 0, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        b0, b1, b2, b3, b4, b5, b6, b7 = _load_col(d_ptrs, 1, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        c0, c1, c2, c3, c4, c5, c6, c7 = _load_col(d_ptrs, 2, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        d0, d1, d2, d3, d4, d5, d6, d7 = _load_col(d_ptrs, 3, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        e0, e1, e2, e3, e4, e5, e6, e7 = _load_col(d_ptrs, 4, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        f0, f1, f2, f3, f4, f5, f6, f7 = _load_col(d_ptrs, 5, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        g0, g1, g2, g3, g4, g5, g6, g7 = _load_col(d_ptrs, 6, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        h0, h1, h2, h3, h4, h5, h6, h7 = _load_col(d_ptrs, 7, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)
        _store_row(v_ptrs, a0, b0, c0, d0, e0, f0, g0, h0, 0, e_stride, pmask)
        _store_row(v_ptrs, a1, b1, c1, d1, e1, f1, g1, h1, 1, e_stride, pmask)
        _store_row(v_ptrs, a2, b2, c2, d2, e2, f2, g2, h2, 2, e_stride, pmask)
        _store_row(v_ptrs, a3, b3, c3, d3, e3, f3, g3, h3, 3, e_stride, pmask)
        _store_row(v_ptrs, a4, b4, c4, d4, e4, f4, g4, h4, 4, e_stride, pmask)
        _store_row(v_ptrs, a5, b5, c5, d5, e5, f5, g5, h5, 5, e_stride, pmask)
        _store_row(v_ptrs, a6, b6, c6, d6, e6, f6, g6, h6, 6, e_stride, pmask)
        _store_row(v_ptrs, a7, b7, c7, d7, e7, f7, g7, h7, 7, e_stride, pmask)
"""

ACC = [[f"v{a}{b}" for b in range(8)] for a in range(8)]  # V[a][b], point 8 a + b


def new_head(per_step: int) -> str:
    """The kernel's body from T on: a runtime loop over the columns, `per_step` of them an iteration."""
    body = ""
    for i in range(per_step):
        col = "j" if i == 0 else f"j + {i}"
        body += (f"            t0, t1, t2, t3, t4, t5, t6, t7 = _load_col_at(d_ptrs, {col}, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7)\n"
                 f"            k0, k1, k2, k3, k4, k5, k6, k7 = _bt_column({col})\n"
                 + "".join(f"            {', '.join(ACC[a])} = _fma8(t{a}, k0, k1, k2, k3, k4, k5, k6, k7, {', '.join(ACC[a])})\n"
                           for a in range(8)))
    return ("        # V[a][b] (vAB): sum over the patch's columns j of T[a][j] B^T[b][j], T = B^T d (a column's\n"
            "        # transform along its rows). A runtime loop over j: the compiler sees one step's loads.\n"
            + "        zero = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)\n"
            + "".join(f"        {', '.join(row)} = {', '.join(['zero'] * 8)}\n" for row in ACC)
            + f"        for j in range(0, 8, {per_step}):\n" + body
            + "".join(f"        _store_v(v_ptrs, {ACC[a][b]}, {8 * a + b}, e_stride, pmask)\n" for a in range(8) for b in range(8)))


OLD_STORE_ROW = """    @triton.jit
    def _store_v(v_ptrs, v, e: tl.constexpr, e_stride, pmask):"""

HELPERS = """    @triton.jit
    def _load_col_at(d_ptrs, j, x, W, C, r0, r1, r2, r3, r4, r5, r6, r7):
        # _load_col for a column j known only when the kernel runs (a loop's index).
        col_ok = _inside(x, j, W)
        p = d_ptrs + j * C
        return _bt(tl.load(p, mask=(r0 & col_ok)[:, None], other=0.0).to(tl.float32),
                   tl.load(p + W * C, mask=(r1 & col_ok)[:, None], other=0.0).to(tl.float32),
                   tl.load(p + 2 * W * C, mask=(r2 & col_ok)[:, None], other=0.0).to(tl.float32),
                   tl.load(p + 3 * W * C, mask=(r3 & col_ok)[:, None], other=0.0).to(tl.float32),
                   tl.load(p + 4 * W * C, mask=(r4 & col_ok)[:, None], other=0.0).to(tl.float32),
                   tl.load(p + 5 * W * C, mask=(r5 & col_ok)[:, None], other=0.0).to(tl.float32),
                   tl.load(p + 6 * W * C, mask=(r6 & col_ok)[:, None], other=0.0).to(tl.float32),
                   tl.load(p + 7 * W * C, mask=(r7 & col_ok)[:, None], other=0.0).to(tl.float32))


    @triton.jit
    def _pick(j, c0, c1, c2, c3, c4, c5, c6, c7):
        # c_j, for a j known only when the kernel runs.
        return tl.where(j == 0, c0, tl.where(j == 1, c1, tl.where(j == 2, c2, tl.where(j == 3, c3, tl.where(
            j == 4, c4, tl.where(j == 5, c5, tl.where(j == 6, c6, c7)))))))


    @triton.jit
    def _bt_column(j):
        # Column j of B^T (the matrix _bt applies): the weight of input j in each of the 8 outputs.
        return (_pick(j, 1.0, 0.0, -5.25, 0.0, 5.25, 0.0, -1.0, 0.0), _pick(j, 0.0, 1.0, 1.0, -4.25, -4.25, 1.0, 1.0, 0.0),
                _pick(j, 0.0, -1.0, 1.0, 4.25, -4.25, -1.0, 1.0, 0.0), _pick(j, 0.0, 0.5, 0.25, -2.5, -1.25, 2.0, 1.0, 0.0),
                _pick(j, 0.0, -0.5, 0.25, 2.5, -1.25, -2.0, 1.0, 0.0), _pick(j, 0.0, 2.0, 4.0, -2.5, -5.0, 0.5, 1.0, 0.0),
                _pick(j, 0.0, -2.0, 4.0, 2.5, -5.0, -0.5, 1.0, 0.0), _pick(j, 0.0, -1.0, 0.0, 5.25, 0.0, -5.25, 0.0, 1.0))


    @triton.jit
    def _fma8(t, k0, k1, k2, k3, k4, k5, k6, k7, v0, v1, v2, v3, v4, v5, v6, v7):
        return (v0 + t * k0, v1 + t * k1, v2 + t * k2, v3 + t * k3, v4 + t * k4, v5 + t * k5, v6 + t * k6, v7 + t * k7)


"""


def main() -> int:
    per_step = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    write_variant(sys.argv[1], sys.argv[2], [(OLD_HEAD, new_head(per_step)), (OLD_STORE_ROW, HELPERS + OLD_STORE_ROW)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
