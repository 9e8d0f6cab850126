"""Probe (2 GPUs of one host): the memory clause of full-2gpu outside the harness, step by step.
Not a harness row. The harness's clause (harness/measure/memory_limit.py) says only pass or fail;
this says where a split decode's memory goes and where it runs out.

The parent holds all but --memory-gb of each GPU (harness/measure/ballast.py's Ballast, as the clause
does); two ranks (NCCL) build each candidate's split decoder (integrations/split_decode.py) on the
synthetic weights and the full preset's seeded latent, then make 3 calls (the first: an eager decode,
the CUDA graph's recording and a replay; then replays). After each step every rank logs, GB: the
allocator's allocated and reserved bytes, what the GPU has in use and free, the peaks, and the
allocator's retries and OOMs (after the first call also its segments by pool: the default one and the
graph's private one); on a failure, the step, the error and its traceback. NCCL logs its
allocations (NCCL_DEBUG_SUBSYS=INIT,ALLOC,REG); its lines about memory go to OUT/NAME.nccl.txt. --cpu: a smoke test (tiny, gloo, no
ballast).

    python scripts/probe_split_memory.py --memory-gb 24 --out OUT --candidate a.py --candidate b.py
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from harness import target
target.use("wan-vae")
from harness import _common  # noqa: E402


PEER_WAIT_S = 60
RUN_CAP_S = 400


def mem(device) -> dict:
    if device.type != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info(device)
    s = torch.cuda.memory_stats(device)
    return {"alloc": round(torch.cuda.memory_allocated(device) / 1e9, 3),
            "reserved": round(torch.cuda.memory_reserved(device) / 1e9, 3),
            "used": round((total - free) / 1e9, 3), "free": round(free / 1e9, 3),
            "peak_alloc": round(torch.cuda.max_memory_allocated(device) / 1e9, 3),
            "peak_reserved": round(torch.cuda.max_memory_reserved(device) / 1e9, 3),
            "retries": s.get("num_alloc_retries", 0), "ooms": s.get("num_ooms", 0)}


def pools(device) -> dict:
    """The allocator's segments by memory pool, GB reserved / allocated: "default", and each CUDA graph's
    private pool by its id (a replayed decode's working memory, kept for the graph's life)."""
    by_pool: dict[str, list[float]] = {}
    for seg in torch.cuda.memory_snapshot():
        if seg.get("device") != device.index:
            continue
        pool = tuple(seg.get("segment_pool_id", (0, 0)))
        key = "default" if pool == (0, 0) else f"graph {pool}"
        got = by_pool.setdefault(key, [0.0, 0.0])
        got[0] += seg["total_size"] / 1e9
        got[1] += seg["allocated_size"] / 1e9
    return {k: [round(v[0], 3), round(v[1], 3)] for k, v in by_pool.items()}


def rank_main(rank, world, store, shape, candidate, log_path, cpu=False):
    from integrations.split_decode import build_split_decoder
    from harness.target.loader import load_source
    device = torch.device("cpu") if cpu else torch.device("cuda", rank)
    if not cpu:
        torch.cuda.set_device(device)
    log = open(f"{log_path}.{rank}", "w")
    step = "init"

    def write(**fields) -> None:  # one JSON line of this rank's log
        log.write(json.dumps(fields) + "\n")
        log.flush()

    def note(what: str) -> None:
        write(t=round(time.perf_counter(), 2), step=what, **mem(device))

    try:
        dist.init_process_group("gloo" if cpu else "nccl", init_method=f"file://{store}", rank=rank,
                                world_size=world, **({} if cpu else {"device_id": device}))
        note("after init_process_group")
        adapter = _common.load_adapter(_common.load_goals())
        vae = adapter.load_model(device)
        z = adapter.make_input(shape, 1, device)
        note("after model + latent")
        step = "build"
        optimize = load_source(Path(candidate), name="optimize_split")
        decode, info = build_split_decoder(optimize.build_decoder, vae, z, namespace=vars(optimize))
        note("after build")
        write(winograd_u=info.get("winograd_u"))
        for i in range(3):
            step = f"call {i + 1}"
            dist.barrier()
            video = decode(z if rank == 0 else None)
            if not cpu:
                torch.cuda.synchronize(device)
            del video
            note(f"after call {i + 1}")
            if i == 0 and not cpu:
                write(pools_after_call_1=pools(device))
        write(passed=True)
    except BaseException as e:  # noqa: BLE001
        write(failed_at=step, error=f"{type(e).__name__}: {str(e)[:400]}", where=traceback.format_exc()[-2500:],
              **mem(device))
    sys.stdout.flush()
    os._exit(0)


@contextlib.contextmanager
def settled_ballast(gb: float, attempts: int = 6):
    """The harness's Ballast, taken again until each GPU has gb GB free once it is held: memory the ranks of a
    run before (killed while waiting on a failed peer) were still letting go of would be the next run's too
    (session 28: 25.12 GB free instead of 24 on one GPU). Never runs a candidate without the limit."""
    from harness.measure.ballast import Ballast, NotEnoughMemory
    for _ in range(attempts):
        try:
            ballast = Ballast(2, gb).take()
        except NotEnoughMemory as e:  # a context still let go of, or memory still freed: wait, then again
            print(f"ballast not taken ({e}): again")
            time.sleep(5)
            continue
        time.sleep(2)
        free = [torch.cuda.mem_get_info(i)[0] / 1e9 for i in range(2)]
        if all(abs(f - gb) < 0.1 for f in free):
            break
        print(f"ballast off the mark ({[round(f, 2) for f in free]} GB free): taken again")
        ballast.release()
        time.sleep(5)
    else:
        raise SystemExit(f"probe_split_memory: no ballast leaving {gb:g} GB on each GPU after {attempts} attempts")
    try:
        yield ballast
    finally:
        ballast.release()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--candidate", type=Path, action="append", required=True)
    p.add_argument("--memory-gb", type=float, default=24.0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cpu", action="store_true", help="a smoke test: tiny, gloo, no ballast")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    shape = [1, 48, 3, 2, 4] if a.cpu else [1, 48, 31, 44, 80]
    for k, cand in enumerate(a.candidate):
        name = f"{k}-{cand.stem[:12]}"  # two files of one name (optimize.py from two folders) log apart
        run_dir = Path(tempfile.mkdtemp())
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,ALLOC,REG"
        (a.out / "nccl").mkdir(exist_ok=True)
        os.environ["NCCL_DEBUG_FILE"] = str(a.out / "nccl" / f"{name}.%h.%p.log")
        t0 = time.perf_counter()
        with (contextlib.nullcontext() if a.cpu else settled_ballast(a.memory_gb)):
            free = [] if a.cpu else [round(torch.cuda.mem_get_info(i)[0] / 1e9, 2) for i in range(2)]
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=rank_main, args=(r, 2, str(run_dir / "store"), shape, str(cand),
                                                          str(a.out / f"{name}.log"), a.cpu)) for r in range(2)]
            for pr in procs:
                pr.start()
            # Once one rank has ended, the other gets PEER_WAIT_S: a rank whose peer failed waits in a
            # collective that never completes. A cold build and its calls take as long as they take (RUN_CAP_S).
            started = time.monotonic()
            while all(pr.is_alive() for pr in procs) and time.monotonic() - started < RUN_CAP_S:
                time.sleep(1)
            for pr in procs:
                pr.join(timeout=PEER_WAIT_S)
                if pr.is_alive():
                    pr.kill()
        print(f"== {cand.name} ({time.perf_counter() - t0:.0f} s; free under the ballast {free} GB)")
        # NCCL's lines about memory, all ranks in one file (a device call brings back only so many files).
        lines = []
        for f in sorted((a.out / "nccl").glob(f"{name}.*.log")):
            lines += [f"{f.stem}: {x}" for x in f.read_text(errors="replace").splitlines()
                      if any(k in x.lower() for k in ("alloc", "cumem", "register", "memory"))]
            f.unlink()
        (a.out / f"{name}.nccl.txt").write_text("\n".join(lines[:2000]) + "\n")
        for r in range(2):
            f = a.out / f"{name}.log.{r}"
            for line in (f.read_text().splitlines() if f.exists() else ["(no log)"]):
                d = json.loads(line) if line.startswith("{") else {"raw": line}
                d.pop("where", None) if "where" in d and r else None
                print(f"  rank {r}: {json.dumps(d)[:700]}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
