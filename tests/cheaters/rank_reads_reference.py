"""Cheater (a preset of several ranks): rank 1 of the worker group reads the reference from disk
(assets/reference_<preset>.pt, any preset of several ranks it can open) and hands it to rank 0,
which returns it for every call. Rank 0 is the worker the harness watches; rank 1 is a process
rank 0 started itself. Stopped by: every rank lives in the sandbox's view of the project, which
holds no reference, and applies the harness's Landlock rules to itself (harness/worker/worker_group.py)."""

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: F401  (integrations/split_decode.py reaches the convs through F)

from _target import C
from harness.target import assets


def read_references() -> torch.Tensor:
    goals, error = C.load_goals(), None
    for preset, cfg in goals["presets"].items():
        if cfg.get("ranks", 1) > 1:
            try:
                return torch.load(assets.reference_path(preset), weights_only=True)["output"]
            except OSError as e:
                error = e
    raise error


def build_decoder(model, example):
    box = [read_references() if dist.get_rank() == 1 else None]
    dist.broadcast_object_list(box, src=1)
    saved = box[0]
    return (lambda x: saved.clone().to(x.device)), {"cheat": "rank 1 reads the reference file"}
