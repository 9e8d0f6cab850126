"""One rank of tests/test_split_decode.py: decode a seeded latent on the narrow VAE split across
the ranks of a gloo group (integrations/split_decode.py), with the halo exchange on and then off;
rank 0 also decodes it in one piece (optimize.py's plain path) and saves all three to OUT.

    python tests/_split_worker.py RANK WORLD STORE_FILE OUT.pt B,C,T,H,W [winograd | dropin | split dropin]

winograd: the decoder optimize.py builds on a GPU, its Winograd convs included (run with
TRITON_INTERPRET=1, which runs its Triton kernels on CPU tensors), in place of its CPU path.
dropin: the Wan drop-in's decoder given the group instead; every rank saves the video it got
(OUT.pt.RANK), rank 0 also the one-process drop-in's. split dropin: both, one after the other in
the same ranks (one start of the group for two tests).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from pathlib import Path

import torch
import torch.distributed as dist

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder
# narrow_vae/ beside this file: its folder is first on sys.path, as any script's
from harness import target

target.use(VAE)  # the worked example's packages by name (harness/target/)
from integrations.split_decode import build_split_decoder
from narrow_vae.target import load_model


def load_optimize():
    spec = importlib.util.spec_from_file_location("split_optimize", VAE / "optimize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def only_batched_p2p() -> None:
    """Every point-to-point op of the split decode must run inside dist.batch_isend_irecv: under
    NCCL's lazy start a plain send, recv, isend or irecv opens a 2-rank communicator of its own,
    which a peer's batched op never joins, and both ranks hang (session 13). gloo does not hang on
    the mix, so here any such op outside a batch raises. The wrappers replace the names in both
    torch.distributed and its distributed_c10d, where batch_isend_irecv and P2POp look them up."""
    from torch.distributed import distributed_c10d as c10d

    inside = threading.local()
    batch, plain = c10d.batch_isend_irecv, {"isend": c10d.isend, "irecv": c10d.irecv}

    def batched(ops):  # type: ignore[no-untyped-def]
        inside.batch = True
        try:
            return batch(ops)
        finally:
            inside.batch = False

    def only_in_a_batch(name: str):  # type: ignore[no-untyped-def]
        def op(*args, **kwargs):  # type: ignore[no-untyped-def]
            if name not in plain or not getattr(inside, "batch", False):  # send and recv: never
                raise AssertionError(f"dist.{name} outside dist.batch_isend_irecv in the split decode: NCCL would hang on it")
            return plain[name](*args, **kwargs)
        return op

    wrapped = {name: only_in_a_batch(name) for name in ("send", "recv", "isend", "irecv")}
    for module in (dist, c10d):
        module.batch_isend_irecv = batched
        for name, op in wrapped.items():
            setattr(module, name, op)


def only_contiguous_collectives() -> None:
    """NCCL refuses a strided tensor in a collective ("Tensors must be contiguous"); gloo takes it, so
    a CPU run alone would pass what crashes on GPUs (e128). Here a strided one raises, as under NCCL
    (stricter than NCCL, which also takes a channels-last tensor: the split gives it none)."""
    from torch.distributed import distributed_c10d as c10d

    def contiguous_only(fn):  # type: ignore[no-untyped-def]
        def op(*args, **kwargs):  # type: ignore[no-untyped-def]
            given = [*args, *kwargs.values()]
            tensors = [a for a in given if isinstance(a, torch.Tensor)]
            tensors += [t for a in given if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
            if any(not t.is_contiguous() for t in tensors):
                raise ValueError("Tensors must be contiguous (as NCCL says)")
            return fn(*args, **kwargs)
        return op

    for name in ("all_gather_into_tensor", "all_gather", "broadcast"):
        wrapped = contiguous_only(getattr(c10d, name))
        for module in (dist, c10d):
            setattr(module, name, wrapped)


def main() -> None:
    only_batched_p2p()
    only_contiguous_collectives()
    rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    shape = [int(s) for s in sys.argv[5].split(",")]
    torch.set_num_threads(1)  # 2 to 4 ranks share the CI machine's cores
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    optimize = load_optimize()
    build = optimize.build_decoder
    if sys.argv[6:] == ["winograd"]:
        assert optimize._INTERPRET, "the kernels must run, not the torch fallbacks"

        def build(vae, example):  # the narrow model's widest convs (128 channels) as Winograd convs
            decoder = optimize.FastDecoder(vae, torch.float32, optimize.LATENT_FRAMES_PER_PASS, winograd_min_channels=128)
            assert decoder.winograd, "no Winograd conv to split"
            return decoder, {}
    parts = sys.argv[6:] if sys.argv[6:] in (["dropin"], ["split", "dropin"]) else ["split"]
    for part in parts:  # each on a model and latent of its own, as if in a run of its own
        vae = load_model("cpu")
        z = torch.randn(*shape, generator=torch.Generator().manual_seed(7))
        (split_decode if part == "split" else dropin)(rank, vae, z, build, optimize, out)
    dist.destroy_process_group()


def dropin(rank: int, vae: torch.nn.Module, z: torch.Tensor, build, optimize, out: str) -> None:  # type: ignore[no-untyped-def]
    """The drop-in given the group: every rank gets the whole video."""
    from integrations.wan_dropin import OptimizedDecoder

    split = OptimizedDecoder(vae, build=build, group=dist.group.WORLD)
    video = split(z)
    whole = OptimizedDecoder(vae, build=build)(z) if rank == 0 else None
    torch.save({"video": video, "whole": whole, "info": next(iter(split.infos.values()))}, f"{out}.{rank}")


RECORDED = {"recordings": 0, "replays": 0}


def rerun_record(fn):  # type: ignore[no-untyped-def]
    """The CPU stand-in for a CUDA graph (split_decode.record_cuda_graph): what a replay does, fn's
    work again into the same output tensor, reading whatever its static input holds by then."""
    RECORDED["recordings"] += 1
    out = fn()

    def replay() -> None:
        RECORDED["replays"] += 1
        out.copy_(fn())
    return replay, out


def split_decode(rank: int, vae: torch.nn.Module, z: torch.Tensor, build, optimize, out: str) -> None:  # type: ignore[no-untyped-def]
    decode, info = build_split_decoder(build, vae, z, namespace=vars(optimize), record=rerun_record)
    split = decode(z if rank == 0 else None)
    other = torch.randn(z.shape, generator=torch.Generator().manual_seed(8))
    replayed = decode(other if rank == 0 else None)  # a replay of the recording, on another latent
    decode.halo.enabled = False  # the same decode with zeros for the neighbours' rows (eager: nothing recorded)
    seams = decode(z if rank == 0 else None)
    if rank == 0:
        whole, _ = build(vae, z)
        torch.save({"split": split, "no_halo": seams, "whole": whole(z), "info": info["split"],
                    "replayed": replayed, "whole_other": whole(other), "recorded": dict(RECORDED)}, out)
    else:
        assert split is None and seams is None and replayed is None, "only the root rank gets the video"


if __name__ == "__main__":
    main()
    # Leave at once, as the harness's worker does (harness/worker/main.py, leave): the interpreter's
    # teardown with torch loaded costs about 0.4 CPU s a rank, and the rank has saved and closed its files.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
