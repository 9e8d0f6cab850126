"""A worker group: the processes of a preset with "ranks": N (N >= 2), one a GPU, in one sandbox.

The harness starts one worker (harness/worker/main.py) as for any preset. That worker is rank 0: the
only process that talks to the harness and maps the shared input and output buffers. Before it
imports torch (so before any candidate code exists), it starts ranks 1..N-1 itself
(`python -I -B -u harness/worker/main.py --rank FD`: harness/worker/main.py command), each on a socket pair of its own and with none of its
other descriptors: they are its children, in the sandbox's namespaces, under its seccomp filter
and in its cgroup (frozen and bounded with it, harness/sandbox/cgroup.py: the bound is the group's, all
ranks together), and each applies the harness's Landlock rules to itself first, as rank 0 does
(each process must be granted its own /proc entry, which the CUDA driver writes to).
All N join one torch.distributed group (`join`: gloo on CPU, NCCL on GPUs, rank k on cuda:k)
through a file in the worker's scratch folder: no network beyond the sandbox's own loopback.

Every request of the harness is forwarded to the other ranks before rank 0 runs its own part.
They run the same handler on a scratch input of the input's shape: the real input reaches them
only inside the call, from rank 0 (the target's build_split decides how), after the harness
handed it over and started its clock. Their output is dropped. Rank 0 says "done" only once
every rank has answered, so the clock covers the whole group. Their peak memory is reported as
the largest over the ranks; a profile is rank 0's; FLOPs are not counted (harness/worker/main.py flops).

A rank that fails takes the group down: it prints why and exits; rank 0 watches every rank and
exits at once when one is gone (in the sandbox it is the namespace's first process, so every
rank dies with it), so the harness sees a crash within moments, not a collective that hangs
until its timeout. Like the rest of the worker, none of this is trusted once candidate code has
run: the harness's own timeout and kill of the whole tree stay the backstop.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness.measure.channel import Channel, ChannelClosed

RANK_GONE = 3  # rank 0's exit code when another rank died
DEATH_NOTICE_S = 1.0  # a dead rank's watcher ends the group within milliseconds of its exit


class Group:
    """Rank 0's view of ranks 1..N-1: started, asked, answered, watched."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.store = str(Path(os.environ.get("TMPDIR", "/tmp")) / "ranks.store")  # the rendezvous
        self._dying = threading.Lock()
        self.busy = False  # a request is out: a failure of rank 0 meanwhile leaves the others in it
        self.peers = [self._start(k, cfg) for k in range(1, int(cfg["ranks"]))]

    def watch(self) -> None:
        """Watch every other rank from now on (threads: started after rank 0's Landlock, which
        binds only the thread that applies it and those it creates later)."""
        for k, (proc, _) in enumerate(self.peers, 1):
            threading.Thread(target=self._watch, args=(k, proc), daemon=True).start()

    def _start(self, rank: int, cfg: dict[str, Any]) -> tuple[subprocess.Popen, Channel]:
        mine, theirs = socket.socketpair()
        # The same isolated interpreter as rank 0's (harness/worker/main.py command).
        argv = [sys.executable, "-I", "-B", "-u", str(Path(__file__).resolve().parent / "main.py"), "--rank",
                str(theirs.fileno())]
        proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        chan = Channel(mine)
        chan.send({**cfg, "rank": rank, "store": self.store})
        return proc, chan

    def wait_for_dead_ranks(self) -> None:
        """Rank 0's own part of a request failed. Where another rank died meanwhile, rank 0's
        failure is only its echo (a collective with a dead peer: "connection closed by peer"),
        and that rank's watcher is about to end the group naming it (seen in CI: the echo reached
        the harness first, or its traceback pushed the dead rank's reason out of the last lines
        the harness reports): give it that moment before rank 0 prints or reports anything."""
        time.sleep(DEATH_NOTICE_S)

    def _watch(self, rank: int, proc: subprocess.Popen) -> None:
        proc.wait()  # a rank leaves only when the group ends, with rank 0 first
        self._gone(rank, proc)

    def _gone(self, rank: int, proc: subprocess.Popen) -> None:
        """Rank `rank` has died (or stopped answering): say so and end the group now."""
        with self._dying:
            try:
                code = proc.wait(timeout=5)
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            except subprocess.TimeoutExpired:
                how = "stopped answering"
            print(f"worker group: rank {rank} {how}; the group stops", file=sys.stderr, flush=True)
            os._exit(RANK_GONE)

    def _answer(self, rank: int, want: str) -> dict[str, Any]:
        proc, chan = self.peers[rank - 1]
        try:
            msg = chan.recv()
        except ChannelClosed:
            msg = {}
        if msg.get("op") != want:
            self._gone(rank, proc)
        return msg

    def await_ready(self) -> int:
        """Wait for every other rank to be ready; the lowest Landlock ABI any of them applied."""
        abis = [self._answer(rank, "ready").get("landlock_abi") for rank in range(1, len(self.peers) + 1)]
        return min(a if isinstance(a, int) else 0 for a in abis)

    def forward(self, op: str) -> None:
        """Hand request `op` to every other rank (before rank 0 runs its own part)."""
        if self.busy:
            raise RuntimeError("the worker group stopped at an earlier failure of rank 0: its other ranks are still in that call")
        for _, chan in self.peers:
            chan.send({"op": op})
        self.busy = True

    def gather(self, op: str, mine: dict[str, Any]) -> dict[str, Any]:
        """Wait for every other rank's answer to `op`; rank 0's reply with the group's figures."""
        theirs = [self._answer(rank, "done") for rank in range(1, len(self.peers) + 1)]
        self.busy = False
        return merged(op, mine, theirs)


def merged(op: str, mine: dict[str, Any], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's reply, but for the group's peak memory (the largest of any rank) and the host figures of a
    reply that has them (a call's, a profiled or counted one's: every rank's, in rank order; replies.host
    checks them)."""
    every = [mine, *theirs]
    if op == "memory":
        peaks = [r["peak_mem_gb"] for r in every if isinstance(r.get("peak_mem_gb"), (int, float))]
        return {**mine, "peak_mem_gb": max(peaks, default=None)}
    if "host" in mine:
        return {**mine, "host": [h for r in every for h in (r["host"] if isinstance(r.get("host"), list) else [None])]}
    return mine


def join(rank: int, ranks: int, device: str, store: str) -> Any:
    """Join the group's torch.distributed process group (every rank calls it; it returns when all have)."""
    import torch
    import torch.distributed as dist

    # The sandbox's network namespace has its loopback only; name it rather than let gloo or
    # NCCL look for the host's interfaces (a host's NCCL_SOCKET_IFNAME would name one it lacks).
    os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = "lo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    else:  # the ranks share the CPU's cores: more threads than cores, and each waits on the others' spinning
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{store}",
                            rank=rank, world_size=ranks)
    return dist.group.WORLD


def build(build_fn: Any, adapter: Any, model: Any, example: Any, group: Any, rank: int) -> tuple[Any, dict]:
    """(forward_fn, info) on this rank: every rank builds with rank 0's example; the target's
    build_split runs the call across the group. A build function marked `on_one_rank` (the
    frozen model's baselines, harness/baselines/) runs whole on rank 0 while the others idle."""
    import torch.distributed as dist

    dist.broadcast(example, 0, group=group)
    if getattr(build_fn, "on_one_rank", False):
        return build_fn(model, example) if rank == 0 else ((lambda x: None), {})
    return adapter.build_split(build_fn, model, example, group)
