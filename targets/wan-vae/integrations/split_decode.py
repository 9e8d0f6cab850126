"""Decode one latent across the ranks of a process group: the frame split in space, halo exchange.

    import torch.distributed as dist
    from integrations.split_decode import build_split_decoder
    dist.init_process_group("nccl")                 # torchrun: one process a GPU ("gloo" on CPU)
    decode, info = build_split_decoder(optimize.build_decoder, vae, example_latent)
    video = decode(z)                               # every rank calls it; root gets the video, others None

How. The latent is cut into one slab a rank along the height or the width (`choose_split`: the
axis that divides evenly, the wider one on a tie). Every rank runs optimize.py's own decoder,
built for its slab's shape, on its slab. That decoder knows nothing of the split: while a split
decode runs, the candidate module's `F` (torch.nn.functional) is replaced by `_SplitFunctional`
and its own same-padded conv functions (`SAME_PADDED_CONVS`, the Winograd conv) are wrapped, so

- a conv with zero padding p > 0 along the split axis runs on the slab as it is, zero-padded;
  then the p output rows at each inner slab border, the only ones that read the padding, are
  computed again on a window of the neighbour's p rows and the slab's own (rank 0 and the last
  rank keep zeros at the frame's edges; a slab between two neighbours does both borders in one
  call, its two windows end to end): the rows of its slab exactly, with no seam, for a
  border's worth of work. (Copying the whole input with its halo rows around it cost rank 0 of a
  2-GPU decode 0.15 s more: profiles/multi_gpu_h100x2.md.) The rows are exchanged while the slab's
  conv runs. Upsampling doubles every slab, so the halo stays 1 row at every stage. The causal time history is per layer and per rank: it
  is the history of the rank's own rows, and the halo of a conv's input buffer (history frames
  included) comes from the neighbours' buffers, which hold the same frames.
- the mid block's spatial attention (softmax over every pixel of a frame, at the latent's
  resolution: the only layer that needs the whole frame) gathers the keys and values of all ranks;
  each rank keeps its own queries, so it computes the attention of its own pixels only.
- everything else is per pixel: the norms are RMS over channels (model/vae.py RMS_norm:
  F.normalize over dim 1), the residual sums, shortcuts, sub-pixel merges and the head's
  unpatchify; no spatial reduction, so nothing else needs an all-reduce.

The video's slabs are gathered on the root rank. One process group of size 1 (or none) is
today's path, untouched: build_split_decoder returns build_decoder's own forward_fn.

On GPUs each rank's slab decode, its exchanges included, is replayed from one CUDA graph after
its first call (`_ReplayedSlab`); the broadcast of the latent and the gather of the video stay eager.

What the candidate must keep for a split to be exact (tests/test_split_decode.py checks it on
CPU): every conv that pads in space goes through its module's `F.conv2d` / `F.conv3d` or a
function named in SAME_PADDED_CONVS, and the frame-wide attention through
`F.scaled_dot_product_attention` with the slab's pixels as its sequence. On GPUs, its decode of
one shape must be one a CUDA graph can record: no host synchronization inside a call, the same
kernels every call.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as torch_F
from torch import Tensor

HEIGHT, WIDTH = -2, -1  # the split axis, counted from the end of a [..., H, W] tensor
# The candidate's own conv functions that zero-pad "same" in space by this many rows (their first
# argument is the input): wrapped like F's convs, by name, where the module defines them.
SAME_PADDED_CONVS = {"winograd_conv": 1}

BuildFn = Callable[[Any, Tensor], tuple[Callable[[Tensor], Tensor], dict]]


def choose_split(h: int, w: int, ranks: int) -> tuple[int, tuple[int, ...]]:
    """(axis, slab sizes in latent rows) for `ranks` slabs of an h x w latent: the axis that divides
    evenly (every rank the same work), the longer one on a tie (thicker slabs: less halo per row,
    less exchanged: a row along the width is h long). Uneven slabs differ by one row at most."""
    def score(size: int) -> tuple[bool, int]:
        return size % ranks == 0, size
    axis, size = max(((HEIGHT, h), (WIDTH, w)), key=lambda a: score(a[1]))
    if size < ranks:
        raise ValueError(f"a {h} x {w} latent cannot be split into {ranks} slabs of one row or more")
    base, extra = divmod(size, ranks)
    return axis, tuple(base + (r < extra) for r in range(ranks))


@dataclass(frozen=True)
class Split:
    """Where each rank's slab lies along the split axis, in latent rows."""

    axis: int
    sizes: tuple[int, ...]
    rank: int

    @property
    def ranks(self) -> int:
        return len(self.sizes)

    def start(self, rank: int) -> int:
        return sum(self.sizes[:rank])

    def slab(self, x: Tensor, rank: int | None = None) -> Tensor:
        """A rank's slab (this one's by default) of a latent-resolution tensor, a view."""
        r = self.rank if rank is None else rank
        return x.narrow(self.axis, self.start(r), self.sizes[r])

    def scale(self, x: Tensor) -> int:
        """How many of x's rows along the axis one latent row of this rank's slab has become."""
        rows = x.shape[self.axis]
        assert rows % self.sizes[self.rank] == 0, f"{rows} rows are not a multiple of the slab's {self.sizes[self.rank]}"
        return rows // self.sizes[self.rank]


def _memory_format(x: Tensor) -> torch.memory_format:
    """x's layout, so that a tensor made from it keeps cuDNN's channels-last kernels."""
    if x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous():
        return torch.channels_last_3d
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return torch.channels_last
    return torch.contiguous_format


class HaloExchange:
    """The communication of a split decode over a process group (NCCL on GPUs, gloo on CPU)."""

    def __init__(self, split: Split, group: dist.ProcessGroup | None) -> None:
        self.split, self.group = split, group
        self.enabled = True  # tests switch it off to show that the halo is what removes the seams

    def neighbours(self) -> tuple[bool, bool]:
        """Whether this slab takes rows from a neighbour before it and after it (none at the frame's
        edges, none while the exchange is off)."""
        r = self.split.rank
        return self.enabled and r > 0, self.enabled and r + 1 < self.split.ranks

    def neighbour_rows(self, x: Tensor, rows: int) -> Callable[[], tuple[Tensor, Tensor]]:
        """Start exchanging border rows: every rank's first and last `rows` rows of x gathered on
        every rank (one all_gather); returns the wait that gives this rank the neighbours' rows next
        to its slab (before, after), zeros where there is no neighbour (the frame's zero padding).
        The exchange runs while the caller computes.

        One all_gather rather than a batched send and receive with each neighbour: on 2 H200s the
        split decode took 0.938 s against 1.111 s (session 22, scripts/multi_gpu.py), and it can
        be recorded in a CUDA graph, where the batched point-to-point one hung at the first
        replay (the same session). The rows are few: each rank receives 2 x ranks borders."""
        axis, n = self.split.axis, x.shape[self.split.axis]
        if n < rows:
            raise ValueError(f"a slab of {n} rows cannot lend a halo of {rows}: too many ranks for this latent")
        has_before, has_after = self.neighbours()
        if not (has_before or has_after):  # the exchange is off (a split has 2 ranks or more)
            nothing = torch.zeros_like(x.narrow(axis, 0, rows))
            return lambda: (nothing, nothing)
        mine = torch.stack([x.narrow(axis, 0, rows), x.narrow(axis, n - rows, rows)]).contiguous()  # NCCL takes no other
        r = self.split.rank
        gathered = torch.empty((2 * self.split.ranks, *mine.shape[1:]), dtype=x.dtype, device=x.device)  # [rank's first, last, ...]
        work = dist.all_gather_into_tensor(gathered, mine, group=self.group, async_op=True)

        def wait() -> tuple[Tensor, Tensor]:
            work.wait()
            edge = None if has_before and has_after else torch.zeros_like(mine[0])  # the frame's zero padding
            return (gathered[2 * r - 1] if has_before else edge,  # the last rows of the slab before mine
                    gathered[2 * r + 2] if has_after else edge)   # the first rows of the slab after
        return wait

    def with_halo(self, x: Tensor, rows: int) -> Tensor:
        """x with `rows` neighbour rows on each side along the split axis, in x's layout."""
        axis, n = self.split.axis, x.shape[self.split.axis]
        before, after = self.neighbour_rows(x, rows)()
        shape = list(x.shape)
        shape[axis] = n + 2 * rows
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=_memory_format(x))
        out.narrow(axis, 0, rows).copy_(before)
        out.narrow(axis, rows, n).copy_(x)
        out.narrow(axis, rows + n, rows).copy_(after)
        return out

    def fix_borders(self, xs: list[Tensor], y: Tensor, rows: int, reach: int, conv: Callable[..., Tensor],
                    pending: list[Callable[[], tuple[Tensor, Tensor]]]) -> Tensor:
        """y, the slab's conv of the inputs xs (each laid out on the slab's rows; pending: the
        neighbour_rows wait of each) computed with zero padding, with its `rows` output rows at
        each slab border that read the padding computed again from the neighbours' rows.
        conv(*windows) maps windows of W rows of each input to the W - reach output rows they
        determine (output row j reads window rows j .. j + reach). A border's window is [`rows`
        halo rows | `reach` of the slab's own] (or the mirror image at the far border): exactly
        the `rows` output rows wanted. A slab with a neighbour on each side puts its two windows
        end to end and makes both borders in one call (one launch of each kernel instead of two:
        the middle ranks of a split are launch-bound on these small windows); the `reach` output
        rows that straddle the two windows are dropped. Costs a border's worth of work instead of
        a copy of the whole input with its halo (and of the output, cropped back)."""
        axis = self.split.axis
        halos = [wait() for wait in pending]
        has_before, has_after = self.neighbours()
        windows = []
        for x, (before, after) in zip(xs, halos):
            n = x.shape[axis]
            parts = ([before, x.narrow(axis, 0, reach)] if has_before else []) + \
                    ([x.narrow(axis, n - reach, reach), after] if has_after else [])
            if parts:
                windows.append(torch.cat(parts, dim=axis).contiguous(memory_format=_memory_format(x)))
        if not windows:
            return y
        fixed = conv(*windows)
        if has_before:
            y.narrow(axis, 0, rows).copy_(fixed.narrow(axis, 0, rows))
        if has_after:
            y.narrow(axis, y.shape[axis] - rows, rows).copy_(fixed.narrow(axis, fixed.shape[axis] - rows, rows))
        return y

    def gather_sequence(self, t: Tensor) -> Tensor:
        """All ranks' t [..., L, E] concatenated along L, where this rank's L pixels are its slab
        of one frame (so rank r's length is L * its slab / this slab: same other side)."""
        me, sizes = self.split.rank, self.split.sizes
        lengths = [t.shape[-2] * s // sizes[me] for s in sizes]
        longest = max(lengths)
        padded = torch_F.pad(t, (0, 0, 0, longest - t.shape[-2])).contiguous()  # all_gather wants equal sizes
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded, group=self.group)
        return torch.cat([p[..., :length, :] for p, length in zip(parts, lengths)], dim=-2)

    def gather_slabs(self, x: Tensor, root: int) -> Tensor | None:
        """The whole tensor on the root rank (group rank) from every rank's slab x; None elsewhere."""
        split, axis = self.split, self.split.axis
        scale = split.scale(x)
        if split.rank != root:  # batched like the root's receives (see _p2p)
            _p2p([dist.P2POp(dist.isend, x.contiguous(), dist.get_global_rank(self.group, root), self.group)])
            return None
        shape = list(x.shape)
        shape[axis] = scale * sum(split.sizes)
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
        ops, parts = [], {}
        for r, size in enumerate(split.sizes):
            if r == root:
                continue
            shape[axis] = scale * size
            parts[r] = torch.empty(shape, dtype=x.dtype, device=x.device)
            ops.append(dist.P2POp(dist.irecv, parts[r], dist.get_global_rank(self.group, r), self.group))
        _p2p(ops)
        parts[root] = x
        for r, size in enumerate(split.sizes):
            out.narrow(axis, scale * split.start(r), scale * size).copy_(parts[r])
        return out


def _p2p(ops: list[dist.P2POp]) -> None:
    """Run point-to-point ops and wait for them. Every send and receive of a split decode goes
    through dist.batch_isend_irecv, on both sides: under NCCL's lazy start (init_process_group
    without a device_id) a plain dist.send opens a 2-rank communicator of its own, which a peer's
    batched receive never joins, and both wait for ever (session 13, the first harness row on 2 H100s)."""
    for request in dist.batch_isend_irecv(ops) if ops else []:
        request.wait()


class _SplitFunctional:
    """torch.nn.functional as the candidate sees it during a split decode: the same functions,
    except the spatially padded convs (their split-axis padding from the neighbours) and the
    attention (its keys and values from every rank)."""

    def __init__(self, halo: HaloExchange) -> None:
        self._halo = halo

    def __getattr__(self, name: str) -> Any:
        return getattr(torch_F, name)

    def conv2d(self, input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
               padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
        return self._conv(torch_F.conv2d, 2, input, weight, bias, stride, padding, dilation, groups)

    def conv3d(self, input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
               padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
        return self._conv(torch_F.conv3d, 3, input, weight, bias, stride, padding, dilation, groups)

    def _conv(self, conv: Callable[..., Tensor], dims: int, x: Tensor, weight: Tensor, bias: Tensor | None,
              stride: Any, padding: Any, dilation: Any, groups: int) -> Tensor:
        pads = _per_dim(padding, dims, weight)
        i = dims + self._halo.split.axis  # the split axis among the conv's spatial dims
        rows = pads[i]
        if rows == 0:  # nothing read across the slab's border (1x1 convs, the time conv)
            return conv(x, weight, bias, stride, padding, dilation, groups)
        if _per_dim(stride, dims)[i] != 1 or _per_dim(dilation, dims)[i] != 1:
            raise NotImplementedError("a split decode halo-exchanges stride-1, undilated convs only")
        reach = weight.shape[2 + i] - 1  # the slab rows a border output row reads besides the halo
        unpadded = tuple(0 if d == i else p for d, p in enumerate(pads))
        if x.shape[i - dims] < reach:  # a slab thinner than the kernel: the halo rows around all of it
            return conv(self._halo.with_halo(x, rows), weight, bias, stride, unpadded, dilation, groups)
        pending = self._halo.neighbour_rows(x, rows)
        y = conv(x, weight, bias, stride, padding, dilation, groups)
        return self._halo.fix_borders([x], y, rows, reach, lambda w: conv(w, weight, bias, stride, unpadded, dilation, groups),
                                      [pending])

    def scaled_dot_product_attention(self, query: Tensor, key: Tensor, value: Tensor, *args: Any,
                                     **kwargs: Any) -> Tensor:
        # The mid block's attention over all pixels of a frame: this rank's queries against every
        # rank's keys and values (gathered: a few MB at the latent's resolution). The softmax does
        # not depend on the order of the keys, so the output is that of the whole frame's rows.
        key, value = self._halo.gather_sequence(key), self._halo.gather_sequence(value)
        return torch_F.scaled_dot_product_attention(query, key, value, *args, **kwargs)


def _per_dim(value: Any, dims: int, weight: Tensor | None = None) -> list[int]:
    """A conv argument (int, tuple, or for padding "valid" / "same") as one int a spatial dim."""
    if isinstance(value, str):
        if value == "valid":
            return [0] * dims
        kernel = weight.shape[2:]
        if value != "same" or any(k % 2 == 0 for k in kernel):
            raise NotImplementedError(f"padding={value!r} with kernel {tuple(kernel)}")
        return [(k - 1) // 2 for k in kernel]
    return [int(value)] * dims if isinstance(value, int) else [int(v) for v in value]


def _same_padded(fn: Callable[..., Tensor], rows: int, halo: HaloExchange) -> Callable[..., Tensor]:
    """fn(x, ...) that zero-pads `rows` in space itself ("same": as many output rows as input
    rows): run on the slab, then its border rows again on windows with the neighbours' rows (of a
    window of W rows, all but the `rows` output rows at each end, which read fn's own padding). A positional
    tensor argument laid out on the same rows and columns as x (the Winograd conv's history
    frames, kept apart from its input) is part of the input: cut into the same windows."""
    def wrapped(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        axis = halo.split.axis
        on_rows = [i for i, a in enumerate(args)
                   if isinstance(a, Tensor) and a.dim() == x.dim() and a.shape[-2:] == x.shape[-2:]]

        def call(inputs: list[Tensor]) -> Tensor:
            rest = list(args)
            for i, a in zip(on_rows, inputs[1:]):
                rest[i] = a
            return fn(inputs[0], *rest, **kwargs)

        def unpadded(inputs: list[Tensor]) -> Tensor:
            """fn's output on inputs that carry their own halo, less the `rows` at each end that
            read fn's zero padding."""
            y = call(inputs)
            return y.narrow(axis, rows, y.shape[axis] - 2 * rows)

        inputs = [x, *(args[i] for i in on_rows)]
        if x.shape[axis] < 2 * rows:  # a slab thinner than the kernel: the halo rows around all of it
            y = unpadded([halo.with_halo(a, rows) for a in inputs])
            return y.contiguous(memory_format=_memory_format(y))
        pending = [halo.neighbour_rows(a, rows) for a in inputs]
        y = call(inputs)
        return halo.fix_borders(inputs, y, rows, 2 * rows, lambda *w: unpadded(list(w)), pending)
    return wrapped


@contextlib.contextmanager
def _hooked(namespace: dict[str, Any], halo: HaloExchange) -> Iterator[None]:
    """The candidate module's F and same-padded convs replaced for the duration of one call."""
    saved = {name: namespace[name] for name in ("F", *SAME_PADDED_CONVS) if name in namespace}
    if "F" not in saved:
        raise RuntimeError("the candidate module has no F (torch.nn.functional): a split decode cannot reach its convs")
    namespace["F"] = _SplitFunctional(halo)
    for name, rows in SAME_PADDED_CONVS.items():
        if name in saved:
            namespace[name] = _same_padded(saved[name], rows, halo)
    try:
        yield
    finally:
        namespace.update(saved)


Record = Callable[[Callable[[], Tensor]], tuple[Callable[[], None], Tensor]]


def record_cuda_graph(fn: Callable[[], Tensor]) -> tuple[Callable[[], None], Tensor]:
    """(replay, output): fn's work recorded into one CUDA graph (not run: replay runs it, into output).
    torch.cuda.graph empties the allocator's cache first: the eager call's blocks go back before the
    graph's own pool takes a decode's working memory."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = fn()
    return graph.replay, out


class _ReplayedSlab:
    """A rank's slab decode, its halo exchanges included, recorded once and replayed (on GPUs from one
    CUDA graph: `record_cuda_graph`). Eagerly the rank's launching thread queues every kernel of the
    whole decode for a slab's worth of GPU work (issue 44); a replay queues one graph. The first call
    decodes once eagerly and drops the result (the candidate's compiles finish, cudnn.benchmark picks
    its algorithms, the communicators start), then records the decode of a static copy of the slab;
    every call copies its slab in and replays. The output is the recording's own tensor: forward_fn
    has sent it or copied it into the video before the next replay overwrites it."""

    def __init__(self, decode: Callable[[Tensor], Tensor], record: Record) -> None:
        self.decode, self.record = decode, record
        self.replay: Callable[[], None] | None = None
        self.static_in = self.static_out = None

    def __call__(self, slab: Tensor) -> Tensor:
        if self.replay is None:
            self.decode(slab)
            self.static_in = slab.clone()
            with torch.cuda.device(slab.device) if slab.is_cuda else contextlib.nullcontext():  # its streams
                self.replay, self.static_out = self.record(lambda: self.decode(self.static_in))
        self.static_in.copy_(slab)
        self.replay()
        return self.static_out


def build_split_decoder(build_decoder: BuildFn, vae: Any, example_latent: Tensor,
                        group: dist.ProcessGroup | None = None, root: int = 0,
                        split: tuple[int, tuple[int, ...]] | None = None,
                        namespace: dict[str, Any] | None = None,
                        record: Record | None = None, replay: bool = True) -> tuple[Callable, dict]:
    """(forward_fn, info) that decodes across the ranks of `group` (the default group when
    torch.distributed is initialized; otherwise, or with one rank, build_decoder's own result).

    Every rank calls it with its vae on its own device and an example of the full latent's shape;
    then every rank calls forward_fn together: the root's latent (group rank `root`) is the one
    decoded (the others may pass None), the root gets the whole video, the others None.
    `split` = (axis, slab sizes) overrides choose_split. `namespace`: the globals of the module
    whose F and conv functions the decoder calls; build_decoder's own module by default.
    `record`: how a rank's decode is recorded for replay (`_ReplayedSlab`): on GPUs a CUDA graph
    unless given, on CPU none (eager); the tests give a CPU stand-in. replay=False: every call eager
    (a graph's memory pool keeps a decode's working memory for the decoder's lifetime: the drop-in's
    low_memory, beside a pipeline's other models, passes it).
    """
    if group is None and dist.is_available() and dist.is_initialized():
        group = dist.group.WORLD
    ranks = dist.get_world_size(group) if group is not None else 1
    if ranks == 1:
        return build_decoder(vae, example_latent)  # today's single-device path, unchanged
    rank = dist.get_rank(group)
    h, w = example_latent.shape[-2:]
    axis, sizes = split or choose_split(h, w, ranks)
    if len(sizes) != ranks or sum(sizes) != example_latent.shape[axis]:
        raise ValueError(f"slabs {sizes} do not cover {example_latent.shape[axis]} rows with {ranks} ranks")
    where = Split(axis, tuple(sizes), rank)
    halo = HaloExchange(where, group)
    slab_fn, info = build_decoder(vae, where.slab(example_latent).clone(memory_format=torch.contiguous_format))
    if namespace is None:
        namespace = build_decoder.__globals__  # the candidate module's globals, which its decoder reads
    shape, device = tuple(example_latent.shape), example_latent.device
    if record is None and device.type == "cuda":
        record = record_cuda_graph
    replayed = _ReplayedSlab(slab_fn, record) if replay and record is not None else None

    def forward_fn(z: Tensor | None) -> Tensor | None:
        full = z.contiguous() if rank == root else torch.empty(shape, dtype=example_latent.dtype, device=device)
        dist.broadcast(full, dist.get_global_rank(group, root), group=group)
        slab = where.slab(full).contiguous()
        with _hooked(namespace, halo):
            video = replayed(slab) if replayed is not None and halo.enabled else slab_fn(slab)
        return halo.gather_slabs(video, root)

    forward_fn.halo = halo  # type: ignore[attr-defined]  (tests switch the exchange off through it)
    info = {**info, "split": {"ranks": ranks, "axis": "height" if axis == HEIGHT else "width",
                              "latent_slabs": list(sizes), "backend": dist.get_backend(group)}}
    return forward_fn, info
