"""The worker's answers to the harness's requests (harness/worker/main.py): the candidate imported and built, each call run into the shared output buffer, its memory, profile and FLOPs."""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any

from harness.measure.channel import Channel
from harness.worker import worker_group
from harness.worker.imports import import_first, load_adapter

# Where main.py settles the descriptors the worker inherited: the channel, the shared input, the shared output.
CHANNEL_FD, INPUT_FD, OUTPUT_FD = 3, 4, 5


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:400]


def _where(e: BaseException, candidate: str) -> str:
    """' (optimize.py line N)': the candidate's own line nearest to where e was raised, if any."""
    lines = [n for f, n in traceback.walk_tb(e.__traceback__) if f.f_code.co_filename == candidate]
    return f" ({Path(candidate).name} line {lines[-1]})" if lines else ""


class Worker:
    """One rank's handlers: rank 0 holds the shared buffers; another rank of a worker group
    (harness/worker/worker_group.py) a scratch input and output of their shapes."""

    def __init__(self, chan: Channel, cfg: dict[str, Any], rank: int = 0) -> None:
        import torch

        from harness import _common
        from harness.measure import shared

        self.torch, self.common, self.chan, self.cfg = torch, _common, chan, cfg
        self.device, self.rank = cfg["device"], rank
        ranks = int(cfg.get("ranks", 1))
        self.group = worker_group.join(rank, ranks, self.device, cfg["store"]) if ranks > 1 else None
        if rank == 0:
            self.inp = shared.attach(cfg["input"], INPUT_FD)
            self.out = shared.attach(cfg["output"], OUTPUT_FD)
        else:
            self.inp, self.out = (torch.zeros(b["shape"], dtype=getattr(torch, b["dtype"]), device=self.device)
                                  for b in (cfg["input"], cfg["output"]))
        goals = _common.load_goals()
        self.goals = goals
        self.adapter = load_adapter(_common, goals, cfg.get("project_names", []))
        # The candidate's module before the model (step 3 of harness/worker/main.py): one that cannot be imported is
        # reported by build() at once, and no model is loaded for it.
        self.import_error: Exception | None = None
        try:
            self.build_fn = load_source(cfg["candidate"], cfg["source"], goals["build_fn"], cfg.get("candidate_home"))
        except Exception as e:  # noqa: BLE001 - the candidate's failure: build() raises it
            self.build_fn, self.import_error = None, e
        self.model = self.adapter.load_model(self.device) if self.import_error is None else None
        self.fn = None

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def deliver(self, y: Any) -> str | None:
        """Copy an output into the shared buffer; the reason it cannot be, or None."""
        from harness.worker.tensor_checks import output_mismatch

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
        if self.import_error is not None:
            raise self.import_error
        build = self.build_fn
        with self.torch.no_grad():
            if self.group is None:
                self.fn, info = build(self.model, self.inp.clone())
            else:
                self.fn, info = worker_group.build(build, self.adapter, self.model, self.inp.clone(), self.group, self.rank)
        self.sync()
        return {"info": info}

    def call(self) -> dict[str, Any]:
        # This rank's launching thread (replies.host): when the candidate's function returned, its kernels
        # queued, and the CPU seconds the thread spent by then. A rank whose function returns only at the
        # call's end, its thread busy throughout, is bound by its launches, not by its GPU or the exchange.
        t0, cpu0 = time.perf_counter(), time.thread_time()
        with self.torch.no_grad():
            y = self.fn(self.inp)
        host = {"host": [[time.perf_counter() - t0, time.thread_time() - cpu0]]}
        if self.rank > 0:  # another rank of a group: rank 0's output is the call's
            self.sync()
            return host
        problem = self.deliver(y)
        return {**host, "error": problem} if problem else host

    def profile(self) -> dict[str, Any]:
        from harness.measure import profile

        with profile.capture(self.device) as prof:
            reply = self.call()
        if "error" not in reply:
            reply["profile"] = profile.summarize(prof, self.device)
        return reply

    def flops(self) -> dict[str, Any]:
        """One call under torch's FLOP counter. The counter cannot follow every op (it refuses some
        attention shapes); then the call runs again without it and the count is left out. A worker
        group's ranks make one plain call: a counter failing on one rank only would have that rank
        call again alone, and the group would hang in its next collective."""
        if self.group is not None:
            return {**self.call(), "flops_error": "not counted in a worker group"}
        counter = flop_counter()
        try:
            with counter:
                reply = self.call()
            reply["flops"] = float(counter.get_total_flops())
        except Exception as e:  # noqa: BLE001 - the count informs; the call must still be answered
            reply = self.call()
            reply["flops_error"] = _one_line(e)
        return reply

    def memory(self) -> dict[str, Any]:  # a group's: the largest over its ranks (group.merged)
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


def load_source(path: str, source: str, build_fn: str, home: str | None = None):
    """Import the candidate from the bytes the harness read and hashed (harness/target/loader.py), first
    written to `path` (in the worker's /tmp: code that reads its own file finds these bytes), its
    folder importable as a script's is; then `home`, the candidate's own folder where it holds
    other Python code (its helpers), importable too."""
    from harness.target.loader import build_function, load_source as load

    _write_once(Path(path), source)
    import_first([str(Path(path).parent), *([home] if home else [])])
    return build_function(load(path, source, "candidate"), build_fn, path)


def _write_once(path: Path, text: str) -> None:
    """Write the candidate's source where the harness says (each rank of a group may: atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(text)
    os.replace(part, path)


def failure(op: Any, e: BaseException, candidate: str) -> str:
    where = "candidate build raised" if op == "build" else "candidate raised"
    return f"{where} {_one_line(e)}{_where(e, candidate)}"
