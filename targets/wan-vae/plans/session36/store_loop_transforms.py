"""Make the variant of optimize.py whose Winograd transforms keep their 64 loads unrolled (all in flight at
once, as the kernels need: plans/session36/looped_input_transform.py lost that and ran 1.5-2x slower) but
write their rows in a runtime loop: row r's values picked by r from the unrolled columns'. The compiler then
sees 64 loads and one row's stores at once instead of every store, which is what its coalescing pass, 70% of
the input transform's 8.3 s compile (profiles/first_call_e184_h200_s36.md), grows with.

    python3 targets/wan-vae/plans/session36/store_loop_transforms.py SRC OUT [input|all]

input: the input transform only (the first call's longest wait); all: the two output transforms too.
"""

import runpy
import sys
from pathlib import Path

write_variant = runpy.run_path(str(Path(__file__).resolve().parent.parent / "_edits.py"))["write_variant"]

OLD_STORES = "".join(f"        _store_row(v_ptrs, a{i}, b{i}, c{i}, d{i}, e{i}, f{i}, g{i}, h{i}, {i}, e_stride, pmask)\n"
                     for i in range(8))
COLUMNS = "abcdefgh"  # column j's values: aI (j = 0) ... hI (j = 7), row I of B^T d
NEW_STORES = ("        # Row r of B^T d across the columns, transformed along them: points 8 r .. 8 r + 7. A runtime loop\n"
              "        # over r: the compiler sees 8 stores, not 64.\n"
              "        for r in range(8):\n"
              "            _store_row_at(v_ptrs, "
              + ", ".join(f"_pick(r, {', '.join(f'{c}{i}' for i in range(8))})" for c in COLUMNS)
              + ", r, e_stride, pmask)\n")

def out_rows(n: int, store: str, tail: str) -> tuple[str, str]:
    """An output transform's n row stores (sIJ: output row I, M column J) and their loop."""
    old = "".join(f"        {store}(out_ptrs, {', '.join(f's{i}{j}' for j in range(8))}, {i}, {tail})\n" for i in range(n))
    pick = lambda j: ", ".join([f"s{i}{j}" for i in range(n)] + [f"s{n - 1}{j}"] * (8 - n))  # noqa: E731 - padded to 8
    new = (f"        for i in range({n}):  # a runtime loop: the compiler sees one row's stores\n"
           f"            {store}_at(out_ptrs, {', '.join(f'_pick(i, {pick(j)})' for j in range(8))}, i, {tail})\n")
    return old, new


OUT_ROWS = [out_rows(6, "_store_out_row", "ty, tx, H, W, inv_scale, mask, CO"),
            out_rows(7, "_store_out_row7", "y0, x0, H, W, inv_scale, mask, CO")]
OUT_ANCHOR = """    @triton.jit
    def _store_out_row(out_ptrs,"""
OUT_HELPERS = """    @triton.jit
    def _store_px_at(out_ptrs, y, i, j: tl.constexpr, x0, W, inv_scale, row_ok, CO, LEFT: tl.constexpr = False):
        # _store_px for a row i known only when the kernel runs.
        ok = row_ok & (x0 + j < W)[:, None]
        if LEFT:
            ok = ok & (x0 + j >= 0)[:, None]
        tl.store(out_ptrs + (i * W + j) * CO, (y * inv_scale).to(out_ptrs.dtype.element_ty), mask=ok)


    @triton.jit
    def _store_out_row_at(out_ptrs, s0, s1, s2, s3, s4, s5, s6, s7, i, ty, tx, H, W, inv_scale, mask, CO):
        # _store_out_row for a row i known only when the kernel runs.
        y0, y1, y2, y3, y4, y5 = _at(s0, s1, s2, s3, s4, s5, s6, s7)
        row_ok = mask & (6 * ty + i < H)[:, None]
        x0 = 6 * tx
        _store_px_at(out_ptrs, y0, i, 0, x0, W, inv_scale, row_ok, CO)
        _store_px_at(out_ptrs, y1, i, 1, x0, W, inv_scale, row_ok, CO)
        _store_px_at(out_ptrs, y2, i, 2, x0, W, inv_scale, row_ok, CO)
        _store_px_at(out_ptrs, y3, i, 3, x0, W, inv_scale, row_ok, CO)
        _store_px_at(out_ptrs, y4, i, 4, x0, W, inv_scale, row_ok, CO)
        _store_px_at(out_ptrs, y5, i, 5, x0, W, inv_scale, row_ok, CO)


    @triton.jit
    def _store_out_row7_at(out_ptrs, s0, s1, s2, s3, s4, s5, s6, s7, i, y0, x0, H, W, inv_scale, mask, CO):
        # _store_out_row7 for a row i known only when the kernel runs.
        p0, p1, p2, p3, p4, p5, p6 = _at7(s0, s1, s2, s3, s4, s5, s6, s7)
        row_ok = mask & ((y0 + i >= 0) & (y0 + i < H))[:, None]
        _store_px_at(out_ptrs, p0, i, 0, x0, W, inv_scale, row_ok, CO, True)
        _store_px_at(out_ptrs, p1, i, 1, x0, W, inv_scale, row_ok, CO, True)
        _store_px_at(out_ptrs, p2, i, 2, x0, W, inv_scale, row_ok, CO, True)
        _store_px_at(out_ptrs, p3, i, 3, x0, W, inv_scale, row_ok, CO, True)
        _store_px_at(out_ptrs, p4, i, 4, x0, W, inv_scale, row_ok, CO, True)
        _store_px_at(out_ptrs, p5, i, 5, x0, W, inv_scale, row_ok, CO, True)
        _store_px_at(out_ptrs, p6, i, 6, x0, W, inv_scale, row_ok, CO, True)


"""

ANCHOR = """    @triton.jit
    def _store_v(v_ptrs, v, e: tl.constexpr, e_stride, pmask):"""
HELPERS = """    @triton.jit
    def _pick(r, x0, x1, x2, x3, x4, x5, x6, x7):
        # x_r, for an r known only when the kernel runs.
        return tl.where(r == 0, x0, tl.where(r == 1, x1, tl.where(r == 2, x2, tl.where(r == 3, x3, tl.where(
            r == 4, x4, tl.where(r == 5, x5, tl.where(r == 6, x6, x7)))))))


    @triton.jit
    def _store_row_at(v_ptrs, r0, r1, r2, r3, r4, r5, r6, r7, a, e_stride, pmask):
        # _store_row for a row a known only when the kernel runs.
        v0, v1, v2, v3, v4, v5, v6, v7 = _bt(r0, r1, r2, r3, r4, r5, r6, r7)
        mask = pmask[:, None]
        dtype = v_ptrs.dtype.element_ty
        base = v_ptrs + 8 * a * e_stride
        tl.store(base, v0.to(dtype), mask=mask)
        tl.store(base + e_stride, v1.to(dtype), mask=mask)
        tl.store(base + 2 * e_stride, v2.to(dtype), mask=mask)
        tl.store(base + 3 * e_stride, v3.to(dtype), mask=mask)
        tl.store(base + 4 * e_stride, v4.to(dtype), mask=mask)
        tl.store(base + 5 * e_stride, v5.to(dtype), mask=mask)
        tl.store(base + 6 * e_stride, v6.to(dtype), mask=mask)
        tl.store(base + 7 * e_stride, v7.to(dtype), mask=mask)


"""


def main() -> int:
    edits = [(OLD_STORES, NEW_STORES), (ANCHOR, HELPERS + ANCHOR)]
    if (sys.argv[3] if len(sys.argv) > 3 else "input") == "all":
        edits += [*OUT_ROWS, (OUT_ANCHOR, OUT_HELPERS + OUT_ANCHOR)]
    write_variant(sys.argv[1], sys.argv[2], edits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
