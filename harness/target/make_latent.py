"""Make the fixed input for a preset: seeded through the target's adapter, or encoded from a clip.

Usage:
    python -P -m harness.target.make_latent [--preset P] [--device D] [--force]     # the target's own source
    python -P -m harness.target.make_latent --seeded                 # seeded input (a secret seed)
    python -P -m harness.target.make_latent --clip video.mp4 [--start S]   # any video file
    python -P -m harness.target.make_latent --synthetic-clip         # render a procedural clip offline, encode it

The seeded input is the adapter's make_input with a secret seed: every target has one. A clip is
for a target whose adapter has input_from_clip (harness/target/adapter.py; the VAE's reads frames with
PyAV and encodes them in strict fp32: model/clip.py), and --synthetic-clip also needs its
render_clip. The default source is the target's (goals.json "input_source"): "clip" is the
target's own clip (the VAE's: the CC-BY Tears of Steel film, streamed over HTTP from --start
seconds), falling back to the seeded input with a note on stderr when it cannot be had (no
network, no PyAV); anything else, or no key (an LLM's token ids, a toy's tensor), the seeded input.

Writes assets/input_<preset>.pt = {"input": fp32 tensor, "meta": {source, seed, sha256, shape,
preset, weights_kind, clip_sha256, ...}} atomically; refuses to overwrite it without --force.
Exit 0 on success, 2 on any bad input (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType
from typing import Any, Callable

import torch

from harness import console, hashing, machine, _common
from harness.target import assets
from harness.errors import Refused


class InputError(Refused):
    """A bad clip or input: one line on stderr, exit 2, nothing written."""


def default_mode(goals: dict[str, Any]) -> str:
    """The target's own source of its input: a clip where goals.json says so, else seeded."""
    return "default" if goals.get("input_source") == "clip" else "seeded"


def clip_function(adapter: ModuleType, name: str) -> Callable[..., Any]:
    """The adapter's input_from_clip or render_clip; a target without it makes no input from a video."""
    fn = getattr(adapter, name, None)
    if not callable(fn):
        raise InputError(f"this target's input is not a video's encoding (its adapter has no {name}), so no clip "
                         f"can make it; use the seeded one (make_latent.py --seeded)")
    return fn


def secret_seed() -> int:
    """A seed drawn from os.urandom and kept only in the input's own asset, which the candidate's
    worker cannot read: a benchmark input made from a public seed (or a public clip at a known
    time) could be rebuilt and decoded by a candidate before the clock starts."""
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def seeded(adapter: ModuleType, shape: list[int], seed: int) -> torch.Tensor:
    return adapter.make_input(list(shape), seed, "cpu").contiguous()


def clip_input(adapter: ModuleType, mode: str, preset: str, shape: list[int], clip: str | None,
               start_s: float | None, device: str, model: torch.nn.Module | None) -> tuple[torch.Tensor, dict] | None:
    """(input, facts) encoded from a clip by the adapter; None where the target's own clip cannot
    be had now (mode default: a note on stderr, and the seeded input is made instead)."""
    from_clip = clip_function(adapter, "input_from_clip")
    try:
        if mode == "synthetic-clip":
            path = assets.assets_dir() / f"synthetic_{preset}.mp4"
            clip_function(adapter, "render_clip")(path, shape)
            z, facts = from_clip(shape, str(path), 0.0, device, model)
            return z, {**facts, "source": "synthetic-clip", "clip_path": str(path)}
        return from_clip(shape, None if mode == "default" else clip or "", start_s, device, model)  # None: its own
    except Refused as e:
        if mode != "default":
            raise InputError(str(e)) from None
        print(f"make_latent: note: the target's own clip is unavailable ({e}); using the seeded input", file=sys.stderr)
        return None


def run(preset: str | None = None, mode: str = "default", clip: str | None = None, start_s: float | None = None,
        device: str | None = None, force: bool = False, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """Make and save the input. mode: default | seeded | clip | synthetic-clip.
    `model` lets tests and prepare reuse an already loaded model."""
    goals = _common.load_goals()
    adapter = _common.load_adapter(goals)
    device = device or machine.default_device()
    preset = _common.pick_preset(goals, preset, device)
    mode = default_mode(goals) if mode == "default" else mode
    path = assets.input_path(preset)
    if path.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it")
    shape = list(goals["presets"][preset]["input_shape"])
    meta: dict[str, Any] = {"preset": preset, "shape": shape, "seed": None, "clip_sha256": None,
                            "weights_kind": adapter.weights_kind()}

    made = None if mode == "seeded" else clip_input(adapter, mode, preset, shape, clip, start_s, device, model)
    if made is None:
        seed = secret_seed()
        z = seeded(adapter, shape, seed)
        meta.update(source="seeded", seed=seed)
    else:
        z, facts = made
        meta.update(facts)
    if z.is_floating_point() and not torch.isfinite(z).all():
        raise InputError("latent has NaN or Inf")
    meta["sha256"] = hashing.sha256_tensor(z)
    assets.save_tensor_atomic({"input": z, "meta": meta}, path)
    return {**meta, "path": str(path)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name from goals.json (default: full on CUDA, tiny on CPU)")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="where to encode (default: cuda when available)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--seeded", action="store_true", help="the seeded latent, no clip")
    src.add_argument("--clip", metavar="PATH", help="encode this video file")
    src.add_argument("--synthetic-clip", action="store_true", help="render a procedural clip and encode it")
    ap.add_argument("--start", type=float, default=None, help="seconds into the clip to start at")
    ap.add_argument("--force", action="store_true", help="overwrite an existing latent")
    args = ap.parse_args(argv)
    mode = "seeded" if args.seeded else "clip" if args.clip else "synthetic-clip" if args.synthetic_clip else "default"
    try:
        facts = run(args.preset, mode, args.clip, args.start, args.device, args.force)
    except Refused as e:
        print(f"make_latent: {str(e).strip().splitlines()[0]}", file=sys.stderr)  # one line
        return 2
    console.emit([f"latent for preset {facts['preset']}: {facts['shape']} from {facts['source']} -> {facts['path']}"], facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
