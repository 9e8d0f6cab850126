"""Probe (GPUs of one host): which halo exchange survives CUDA-graph capture, and what one costs.

Issue 44: the split decode is bound by its kernel launches on the host, and a CUDA graph of each
rank's decode would remove them, but the decode exchanges border rows with its neighbours ~1,000
times a call, and a capture of NCCL point-to-point operations hung on 2 H200s (session 20). Before
building a graphed split, this measures, on 2 or more GPUs, each way of doing one exchange of the
decode's size (a border of 1 x C x T x 1 x W, both neighbours), eagerly and replayed from a graph:

  p2p         dist.batch_isend_irecv with each neighbour (what integrations/split_decode.py does)
  all_gather  every rank's two borders gathered everywhere (a collective: torch's NCCL group
              supports those under capture); each rank takes its neighbours' parts
  symm_mem    torch's symmetric memory: each rank writes its borders into its neighbours' buffers
              over NVLink (copy kernels), then a device-side barrier; no NCCL at all

For each: whether capture and replay work (a hang is caught by a watchdog, which prints the stacks
and ends the probe's rank with exit 3), whether the received rows are right on every replay, and
microseconds an exchange (a loop of STEPS exchanges, each beside a small kernel, timed eagerly and
replayed). Each mode runs in its own set of processes, so a hang loses only that mode's row.

    python scripts/probe_graph_exchange.py --gpus 2 [--modes p2p,all_gather,symm_mem] [--out FILE]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS = 200  # exchanges in one timed loop (one graph)
SHAPE = (1, 256, 2, 1, 160)  # a border row of the decode's middle stages: C x T x 1 x W, fp32 (exact for these values)
HANG_S = 90


def _border(rank: int, step: int, device: torch.device) -> torch.Tensor:
    """The rows a rank sends at a step: values that name the rank and the step, so a stale or
    misrouted receive shows."""
    return torch.full(SHAPE, float(rank * 1000 + step), device=device, dtype=torch.float32)


class Exchange:
    """One exchange mode: send this rank's border to both neighbours, receive theirs into `got`."""

    def __init__(self, mode: str, rank: int, world: int, device: torch.device) -> None:
        self.mode, self.rank, self.world, self.device = mode, rank, world, device
        self.before = rank - 1 if rank > 0 else None
        self.after = rank + 1 if rank + 1 < world else None
        self.send = torch.empty(SHAPE, device=device, dtype=torch.float32)
        self.got_before = torch.zeros(SHAPE, device=device, dtype=torch.float32)
        self.got_after = torch.zeros(SHAPE, device=device, dtype=torch.float32)
        if mode == "all_gather":
            self.gathered = torch.empty((world, *SHAPE), device=device, dtype=torch.float32)
        if mode == "symm_mem":
            import torch.distributed._symmetric_memory as symm_mem
            # Two slots a rank: [0] written by the rank before, [1] by the rank after.
            name = dist.group.WORLD.group_name
            if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before torch 2.8, a no-op after
                symm_mem.enable_symm_mem_for_group(name)
            self.inbox = symm_mem.empty((2, *SHAPE), device=device, dtype=torch.float32)
            self.handle = symm_mem.rendezvous(self.inbox, name)
            self.peer_inbox = {p: self.handle.get_buffer(p, (2, *SHAPE), torch.float32)
                               for p in (self.before, self.after) if p is not None}

    def __call__(self) -> None:
        if self.mode == "p2p":
            ops = []
            for peer, got in ((self.before, self.got_before), (self.after, self.got_after)):
                if peer is not None:
                    ops += [dist.P2POp(dist.isend, self.send, peer), dist.P2POp(dist.irecv, got, peer)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
        elif self.mode == "all_gather":
            dist.all_gather_into_tensor(self.gathered, self.send)
            if self.before is not None:
                self.got_before.copy_(self.gathered[self.before])
            if self.after is not None:
                self.got_after.copy_(self.gathered[self.after])
        else:
            self.handle.barrier(channel=0)  # every rank has read what it was sent last time
            if self.after is not None:
                self.peer_inbox[self.after][0].copy_(self.send)
            if self.before is not None:
                self.peer_inbox[self.before][1].copy_(self.send)
            self.handle.barrier(channel=1)  # every write has landed
            if self.before is not None:
                self.got_before.copy_(self.inbox[0])
            if self.after is not None:
                self.got_after.copy_(self.inbox[1])


def _loop(exchange: Exchange, base: int) -> list[torch.Tensor]:
    """STEPS exchanges, each after a small kernel that makes the border; the received rows kept."""
    seen = []
    for step in range(STEPS):
        exchange.send.copy_(_border(exchange.rank, base + step, exchange.device))
        exchange()
        seen.append(torch.stack([exchange.got_before[0, 0, 0, 0, 0], exchange.got_after[0, 0, 0, 0, 0]]))
    return seen


def _expected(rank: int, world: int, base: int) -> list[list[float]]:
    return [[float((rank - 1) * 1000 + base + s) if rank > 0 else 0.0,
             float((rank + 1) * 1000 + base + s) if rank + 1 < world else 0.0] for s in range(STEPS)]


def _right(seen: list[torch.Tensor], rank: int, world: int, base: int) -> bool:
    got = torch.stack(seen).float().cpu().tolist()
    return got == _expected(rank, world, base)


def _timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def rank_main(rank: int, world: int, store: str, mode: str, out: str) -> None:
    faulthandler.enable()
    watchdog = threading.Timer(HANG_S, lambda: (faulthandler.dump_traceback(all_threads=True),
                                                print(f"rank {rank} {mode}: hung for {HANG_S} s", flush=True), os._exit(3)))
    watchdog.daemon = True
    watchdog.start()
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world, device_id=device)
    row: dict = {"mode": mode, "rank": rank}
    try:
        exchange = Exchange(mode, rank, world, device)
        seen = _loop(exchange, 0)  # eager, also NCCL's lazy start
        torch.cuda.synchronize()
        row["eager_right"] = _right(seen, rank, world, 0)
        row["eager_us"] = _timed(lambda: _loop(exchange, 0), 5) / STEPS * 1e6
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        dist.barrier()
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            seen = _loop(exchange, 7)
        row["captured"] = True
        graph.replay()
        torch.cuda.synchronize()
        row["replay_right"] = _right(seen, rank, world, 7)
        for r in range(3):  # again: the same graph on buffers that already hold this step's rows
            for t in seen:
                t.zero_()
            graph.replay()
            torch.cuda.synchronize()
            row["replay_right"] = row["replay_right"] and _right(seen, rank, world, 7)
        row["replay_us"] = _timed(graph.replay, 10) / STEPS * 1e6
    except Exception as e:  # noqa: BLE001 - a probe reports what broke
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    torch.cuda.synchronize()
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
    dist.barrier()
    os._exit(0)  # not destroy_process_group: it hangs after NCCL work was captured (pytorch#115388)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--modes", default="p2p,all_gather,symm_mem")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if torch.cuda.device_count() < args.gpus:
        sys.exit(f"probe_graph_exchange: {args.gpus} GPUs asked for, {torch.cuda.device_count()} here")
    print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
          f"{args.gpus}x {torch.cuda.get_device_name(0)}; {STEPS} exchanges of {SHAPE} fp32 a loop", flush=True)
    rows = []
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rows.jsonl"
            out.touch()
            start = time.perf_counter()
            context = mp.start_processes(rank_main, args=(args.gpus, str(Path(tmp) / "store"), mode, str(out)),
                                         nprocs=args.gpus, join=False, start_method="spawn")
            try:
                context.join()
            except Exception as e:  # noqa: BLE001 - a rank that exits 3 (hung) ends here
                print(f"{mode}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
            got = [json.loads(line) for line in out.read_text().splitlines()]
            rows += got or [{"mode": mode, "error": "no rank finished (hung or crashed)"}]
            print(f"{mode}: {time.perf_counter() - start:.1f} s", flush=True)
    lines = ["| mode | rank | eager right | eager us/exchange | captured | replay right | replay us/exchange | error |",
             "|---|---:|---|---:|---|---|---:|---|"]
    for r in rows:
        fmt = lambda k: f"{r[k]:.1f}" if isinstance(r.get(k), float) else str(r.get(k, "-"))  # noqa: E731
        lines.append(f"| {r['mode']} | {r.get('rank', '-')} | {r.get('eager_right', '-')} | {fmt('eager_us')} | "
                     f"{r.get('captured', '-')} | {r.get('replay_right', '-')} | {fmt('replay_us')} | {r.get('error', '')} |")
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
