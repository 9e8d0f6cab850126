"""Probe (2 GPUs of one host): the memory clause of full-2gpu outside the harness, step by step.
Not a harness row. The harness's clause (harness/measure/memory_limit.py) says only pass or fail;
this says where a split decode's memory goes and where it runs out.

The parent holds all but --memory-gb of each GPU (harness/measure/ballast.py's Ballast, as the clause
does); two ranks (NCCL) build each candidate's split decoder (integrations/split_decode.py) on the
synthetic weights and the full preset's seeded latent, then make 3 calls (the first: an eager decode,
the CUDA graph's recording and a replay; then replays). After each step every rank logs, GB: the
allocator's allocated and reserved bytes, what the GPU has in use and free, the peaks, and the
allocator's retries and OOMs; on a failure, the step, the error and its traceback. NCCL logs its
allocations (NCCL_DEBUG_SUBSYS=INIT,ALLOC,REG) to OUT/nccl/. --cpu: a smoke test (tiny, gloo, no
ballast).

    python scripts/probe_split_memory.py --memory-gb 24 --out OUT --candidate a.py --candidate b.py
"""
from __future__ import annotations

import argparse, contextlib, json, os, sys, tempfile, time, traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from harness import target
target.use("wan-vae")
from harness import _common  # noqa: E402


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


def rank_main(rank, world, store, shape, candidate, log_path, cpu=False):
    from integrations.split_decode import build_split_decoder
    from harness.target.loader import load_source
    device = torch.device("cpu") if cpu else torch.device("cuda", rank)
    if not cpu:
        torch.cuda.set_device(device)
    log = open(f"{log_path}.{rank}", "w")
    step = "init"
    def note(what):
        log.write(json.dumps({"t": round(time.perf_counter(), 2), "step": what, **mem(device)}) + "\n"); log.flush()
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
        for i in range(3):
            step = f"call {i + 1}"
            dist.barrier()
            video = decode(z if rank == 0 else None)
            if not cpu:
                torch.cuda.synchronize(device)
            del video
            note(f"after call {i + 1}")
        log.write(json.dumps({"passed": True}) + "\n")
    except BaseException as e:  # noqa: BLE001
        log.write(json.dumps({"failed_at": step, "error": f"{type(e).__name__}: {str(e)[:400]}",
                              "where": traceback.format_exc()[-2500:], **mem(device)}) + "\n")
    log.flush()
    sys.stdout.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--candidate", type=Path, action="append", required=True)
    p.add_argument("--memory-gb", type=float, default=24.0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cpu", action="store_true", help="a smoke test: tiny, gloo, no ballast")
    a = p.parse_args()
    from harness.measure.ballast import Ballast
    a.out.mkdir(parents=True, exist_ok=True)
    shape = [1, 48, 3, 2, 4] if a.cpu else [1, 48, 31, 44, 80]
    for cand in a.candidate:
        name = cand.stem[:12]
        run_dir = Path(tempfile.mkdtemp())
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,ALLOC,REG"
        (a.out / "nccl").mkdir(exist_ok=True)
        os.environ["NCCL_DEBUG_FILE"] = str(a.out / "nccl" / f"{name}.%h.%p.log")
        t0 = time.perf_counter()
        with (contextlib.nullcontext() if a.cpu else Ballast(2, a.memory_gb)):
            free = [] if a.cpu else [round(torch.cuda.mem_get_info(i)[0] / 1e9, 2) for i in range(2)]
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=rank_main, args=(r, 2, str(run_dir / "store"), shape, str(cand),
                                                          str(a.out / f"{name}.log"), a.cpu)) for r in range(2)]
            for pr in procs:
                pr.start()
            deadline = time.monotonic() + 110  # a rank left waiting on a failed peer's collective
            for pr in procs:
                pr.join(timeout=max(1.0, deadline - time.monotonic()))
                if pr.is_alive():
                    pr.kill()
        print(f"== {cand.name} ({time.perf_counter() - t0:.0f} s; free under the ballast {free} GB)")
        for r in range(2):
            f = a.out / f"{name}.log.{r}"
            for line in (f.read_text().splitlines() if f.exists() else ["(no log)"]):
                d = json.loads(line) if line.startswith("{") else {"raw": line}
                d.pop("where", None) if "where" in d and r else None
                print(f"  rank {r}: {json.dumps(d)[:700]}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
