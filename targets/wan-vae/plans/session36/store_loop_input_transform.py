"""Make the variant of optimize.py whose Winograd input transform keeps its 64 loads unrolled (all in flight
at once, as the kernel needs: plans/session36/looped_input_transform.py lost that and ran 1.5-2x slower) but
writes V's rows in a runtime loop: row r's 8 points from the 8 columns' values picked by r. The compiler then
sees 64 loads and 8 stores at once instead of 64 and 64, which is what its coalescing pass, 70% of the
kernel's 8.3 s compile (profiles/first_call_e184_h200_s36.md), grows with.

    python3 targets/wan-vae/plans/session36/store_loop_input_transform.py SRC OUT
"""

import sys
from pathlib import Path

OLD_STORES = "".join(f"        _store_row(v_ptrs, a{i}, b{i}, c{i}, d{i}, e{i}, f{i}, g{i}, h{i}, {i}, e_stride, pmask)\n"
                     for i in range(8))
COLUMNS = "abcdefgh"  # column j's values: aI (j = 0) ... hI (j = 7), row I of B^T d
NEW_STORES = ("        # Row r of B^T d across the columns, transformed along them: points 8 r .. 8 r + 7. A runtime loop\n"
              "        # over r: the compiler sees 8 stores, not 64.\n"
              "        for r in range(8):\n"
              "            _store_row_at(v_ptrs, "
              + ", ".join(f"_pick(r, {', '.join(f'{c}{i}' for i in range(8))})" for c in COLUMNS)
              + ", r, e_stride, pmask)\n")

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
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    text = src.read_text()
    for old in (OLD_STORES, ANCHOR):
        if text.count(old) != 1:
            print(f"store_loop_input_transform: {src} does not hold the expected code once: {old.splitlines()[0]!r}",
                  file=sys.stderr)
            return 1
    out.write_text(text.replace(OLD_STORES, NEW_STORES).replace(ANCHOR, HELPERS + ANCHOR))
    return 0


if __name__ == "__main__":
    sys.exit(main())
