"""A rank's halo exchange without the other ranks (integrations/split_decode.py's HaloExchange, its
neighbour rows read from the whole tensor): the border arithmetic of a split in one process, for
tests/test_split_decode.py and tests/_split_kernels_check.py. Needs the wan-vae target in use
(harness.target.use) before import."""

from __future__ import annotations

import torch
from integrations.split_decode import HaloExchange, Split


class OneProcessHalo:
    """A rank's halo exchange without the other ranks: the neighbours' rows are read from the whole
    tensor (of `wholes`, the one the slab is cut from: the same layer's input for the whole frame),
    as the real exchange delivers them."""

    def __init__(self, wholes: list[torch.Tensor], split: "Split") -> None:
        self.halo = HaloExchange(split, None)
        scale = wholes[0].shape[split.axis] // sum(split.sizes)
        start, n = scale * split.start(split.rank), scale * split.sizes[split.rank]

        def neighbour_rows(x: torch.Tensor, rows: int):
            assert x.shape[split.axis] == n
            whole, = (w for w in wholes if w.shape == x.shape[:split.axis] + w.shape[split.axis:]
                      and torch.equal(w.narrow(split.axis, start, n), x))
            size = whole.shape[split.axis]
            def rows_at(first: int) -> torch.Tensor:
                if first < 0 or first + rows > size:
                    return torch.zeros_like(whole.narrow(split.axis, 0, rows))
                return whole.narrow(split.axis, first, rows).clone()
            return lambda: (rows_at(start - rows), rows_at(start + n))
        self.halo.neighbour_rows = neighbour_rows
        self.start, self.n = start, n
