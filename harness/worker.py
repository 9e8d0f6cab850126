"""The worker: the only process that runs candidate code. Started by harness/session.py.

    python -m harness.worker SOCKET INPUT OUTPUT     (the descriptors it inherited)

Its life, in order:
 0. move its descriptors to 3, 4 and 5, close every other, and start again as
    `python -m harness.worker 3 4 5`: the numbers the harness had free depend on the tool that
    started it (run_experiment holds lock files, verify does not), and a candidate could read
    them in /proc/self; now every tool's worker looks the same;
 1. read the configuration from the harness;
 2. apply Landlock (harness/landlock.py), the second wall inside the namespaces the harness
    started it in (harness/sandbox.py), while it still has one thread and no candidate code;
 3. import torch, map the two shared buffers (harness/shared.py), load the frozen model;
 4. time the boundary for the harness: copy an output-sized tensor into the shared output buffer,
    before any candidate code exists in this process;
 5. import the candidate from the source bytes the harness sent (not from the file, which the
    agent may be editing) and build it with an example input;
 6. answer calls: run forward_fn on the shared input buffer, copy the result into the shared
    output buffer, synchronize, say "done". Every call looks the same: the worker is never told
    whether a call is a warm-up, timed, checked or profiled, nor which tool started it;
 7. on "exit", leave at once (os._exit): no interpreter teardown (half a second of CPU with torch
    loaded), no finalizers or atexit handlers of the candidate's. The harness kills whatever is
    left either way.

Nothing here is trusted after step 5: candidate code can patch any of it. The harness therefore
believes only the output buffer and the moment "done" arrives (it takes the time itself and
checks every output); what the worker reports besides (info, profile) is informational.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # see harness/__init__.py
from harness import landlock  # noqa: E402  (standard library only)
from harness.channel import Channel  # noqa: E402


CHANNEL_FD, INPUT_FD, OUTPUT_FD = 3, 4, 5
FIRST_FREE_FD = 6


def settle_fds(given: list[int]) -> bool:
    """Put the inherited descriptors at 3, 4, 5 and close every other above 2. True when they
    moved, and this process must start again for its command line to be the same for every tool."""
    wanted = [CHANNEL_FD, INPUT_FD, OUTPUT_FD]
    if given != wanted:
        copies = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in given]  # above every target first
        for target, fd in zip(wanted, copies):
            os.dup2(fd, target, inheritable=True)
    os.closerange(FIRST_FREE_FD, os.sysconf("SC_OPEN_MAX"))
    return given != wanted


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:400]


def _where(e: BaseException, candidate: str) -> str:
    """' (optimize.py line N)': the candidate's own line nearest to where e was raised, if any."""
    lines = [n for f, n in traceback.walk_tb(e.__traceback__) if f.f_code.co_filename == candidate]
    return f" ({Path(candidate).name} line {lines[-1]})" if lines else ""


class Worker:
    def __init__(self, chan: Channel, cfg: dict[str, Any]) -> None:
        import torch

        from harness import _common
        from harness import shared

        self.torch, self.common, self.chan, self.cfg = torch, _common, chan, cfg
        self.device = cfg["device"]
        self.inp = shared.attach(cfg["input"], INPUT_FD)
        self.out = shared.attach(cfg["output"], OUTPUT_FD)
        goals = _common.load_goals()
        self.goals = goals
        self.adapter = _common.load_adapter(goals)
        self.model = self.adapter.load_model(self.device)
        self.fn = None

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def deliver(self, y: Any) -> str | None:
        """Copy an output into the shared buffer; the reason it cannot be, or None."""
        from harness.tensor_checks import output_mismatch

        why = output_mismatch(y, self.out.shape, self.out.dtype, "expected")
        if why:
            return why
        self.out.copy_(y)
        self.sync()
        return None

    def calibrate(self) -> dict[str, Any]:
        probe = getattr(self, "_probe", None)
        if probe is None:
            probe = self._probe = self.torch.zeros_like(self.out)
        self.out.copy_(probe)
        self.sync()
        return {}

    def build(self) -> dict[str, Any]:
        self.__dict__.pop("_probe", None)
        build = load_source(self.cfg["candidate"], self.cfg["source"], self.goals["build_fn"])
        with self.torch.no_grad():
            self.fn, info = build(self.model, self.inp.clone())
        self.sync()
        return {"info": info}

    def call(self) -> dict[str, Any]:
        with self.torch.no_grad():
            y = self.fn(self.inp)
        problem = self.deliver(y)
        return {"error": problem} if problem else {}

    def profile(self) -> dict[str, Any]:
        from harness import profile

        with profile.capture(self.device) as prof:
            reply = self.call()
        if "error" not in reply:
            reply["profile"] = profile.summarize(prof, self.device)
        return reply

    def flops(self) -> dict[str, Any]:
        """One call under torch's FLOP counter. The counter cannot follow every op (it refuses some
        attention shapes); then the call runs again without it and the count is left out."""
        counter = flop_counter()
        try:
            with counter:
                reply = self.call()
            reply["flops"] = float(counter.get_total_flops())
        except Exception as e:  # noqa: BLE001 - the count informs; the call must still be answered
            reply = self.call()
            reply["flops_error"] = _one_line(e)
        return reply

    def memory(self) -> dict[str, Any]:
        cuda = self.device == "cuda"
        return {"peak_mem_gb": self.torch.cuda.max_memory_allocated() / 1e9 if cuda else None}


def flop_counter():
    """torch's FLOP counter, taught the matmuls with an output dtype (torch.bmm(a, b, out_dtype=...)):
    it looks formulas up by op, not overload, and its mm/bmm formulas take that dtype for the
    output shape and raise (torch 2.11 to 2.13)."""
    import torch
    from torch.utils import flop_counter as fc

    def out_dtype_too(formula):
        return lambda a_shape, b_shape, out_dtype=None, *, out_shape=None, **kw: formula(a_shape, b_shape)

    aten = torch.ops.aten
    mapping = {aten.mm: out_dtype_too(fc.mm_flop), aten.bmm: out_dtype_too(fc.bmm_flop)}
    return fc.FlopCounterMode(display=False, custom_mapping=mapping)


def load_source(path: str, source: str, build_fn: str):
    """Import the candidate from the bytes the harness read and hashed (harness/loader.py), its
    folder importable as a script's is."""
    from harness.loader import build_function, load_source as load

    return build_function(load(path, source, "candidate", own_folder_first=True), build_fn, path)


def serve(chan: Channel) -> None:
    cfg = chan.recv()
    os.environ["AUTO_OPTIM_GOALS"] = cfg["goals_path"]
    try:  # under memory pressure the kernel kills the worker first, never the harness (children inherit it)
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass
    abi = 0
    if cfg.get("landlock"):
        # Its own /proc entry too: the CUDA driver writes there when it starts (seen on an H100).
        abi = landlock.restrict(cfg["landlock"]["hidden"], cfg["landlock"]["writable"] + [f"/proc/{os.getpid()}"])
    t0 = time.perf_counter()
    worker = Worker(chan, cfg)
    chan.send({"op": "ready", "landlock_abi": abi, "load_s": time.perf_counter() - t0})
    while True:
        msg = chan.recv()
        op = msg.get("op")
        if op == "exit":  # at once: tearing down an interpreter that holds torch costs ~0.5 s of CPU
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        handler = getattr(worker, op, None) if op in ("calibrate", "build", "call", "profile", "flops", "memory") else None
        if handler is None:
            chan.send({"op": "error", "reason": f"unknown request {op!r}"})
            continue
        try:
            chan.send({"op": "done", **handler()})
        except Exception as e:  # noqa: BLE001 - any failure of the candidate is reported, then we carry on
            traceback.print_exc()
            where = "candidate build raised" if op == "build" else "candidate raised"
            chan.send({"op": "error", "reason": f"{where} {_one_line(e)}{_where(e, cfg['candidate'])}"})


def main() -> None:
    if settle_fds([int(a) for a in sys.argv[1:4]]):
        os.execv(sys.executable, [sys.executable, "-m", "harness.worker", *map(str, (CHANNEL_FD, INPUT_FD, OUTPUT_FD))])
    chan = Channel(socket.socket(fileno=CHANNEL_FD))
    try:
        serve(chan)
    except landlock.Unavailable as e:
        chan.send({"op": "error", "reason": f"sandbox unavailable: {e}"})


if __name__ == "__main__":
    main()
