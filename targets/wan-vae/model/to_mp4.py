"""Decode a latent file with optimize.py and write an H.264 mp4 you can watch.

Usage:
    python targets/wan-vae/model/to_mp4.py LATENT --out video.mp4 [--fps 24] [--compare] [--force]
                           [--preset-free] [--candidate FILE] [--device cpu|cuda] [--crf 18]

LATENT: an assets/input_<preset>.pt dict ({"input": tensor, ...}) or a bare tensor .pt, shaped
[1, 48, T, h, w] (or [48, T, h, w]), floating point. Without --preset-free its shape must be one
of goals.json's presets (the shapes the candidate is verified on).

The decode time is measured with a device sync on both sides; on CUDA one warm-up call (compile,
autotuning) runs first and is reported apart, so the time is comparable to bench.py's median.
--compare also decodes with the frozen fp32 model (before the candidate is imported) and writes
<out>_compare.mp4 (reference | candidate | amplified difference) and <out>_strip.png (the frame
that differs most). Outputs are written to temporary files and renamed at the end: a failure
leaves nothing behind, and existing files are kept unless --force.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from harness import console, machine, _common
from harness.errors import Refused

AMPLIFY = 20.0


class InputError(Exception):
    """Bad input from the user: one line, exit 1."""


class Progress:
    """A minimal stderr progress bar (redrawn in place on a terminal, one line otherwise)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self.tty = sys.stderr.isatty()

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.tty or self.done >= self.total:
            filled = int(30 * self.done / self.total)
            end = "\n" if self.done >= self.total else ""
            print(f"\r{self.label:<14} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}",
                  end=end, file=sys.stderr, flush=True)


def load_latent(path: Path, goals: dict[str, Any], preset_free: bool) -> torch.Tensor:
    if not path.is_file():
        raise InputError(f"latent file not found: {path}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user error
        raise InputError(f"cannot read {path}: {type(e).__name__}: {e}") from None
    z = obj.get("input") if isinstance(obj, dict) else obj
    if not isinstance(z, torch.Tensor):
        raise InputError(f"{path} holds no tensor (expected a tensor or a dict with 'input')")
    if not z.dtype.is_floating_point:
        raise InputError(f"latent dtype {z.dtype} is not floating point")
    if z.dim() == 4:
        z = z.unsqueeze(0)
    if z.dim() != 5 or z.shape[0] != 1 or z.shape[1] != 48 or min(z.shape) < 1:
        raise InputError(f"latent shape {tuple(z.shape)} is not [1, 48, T, h, w]")
    presets = {tuple(p["input_shape"]) for p in goals["presets"].values()}
    if not preset_free and tuple(z.shape) not in presets:
        raise InputError(f"latent shape {tuple(z.shape)} is no goals.json preset {sorted(presets)}; "
                         "pass --preset-free to decode it anyway (unverified shape)")
    if not torch.isfinite(z).all():
        raise InputError("latent has NaN or Inf")
    return z.float()


def output_paths(out: Path, compare: bool) -> list[Path]:
    paths = [out]
    if compare:
        paths += [out.with_name(f"{out.stem}_compare.mp4"), out.with_name(f"{out.stem}_strip.png")]
    return paths


def check_outputs(paths: list[Path], force: bool) -> None:
    if paths[0].suffix.lower() != ".mp4":
        raise InputError(f"output must be an .mp4 file: {paths[0]}")
    parent = paths[0].parent
    if not parent.is_dir():
        raise InputError(f"output directory does not exist: {parent}")
    try:  # try it, rather than trust permission bits (root passes those on a read-only place)
        tempfile.TemporaryFile(dir=parent).close()
    except OSError:
        raise InputError(f"output directory is not writable: {parent}") from None
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise InputError(f"output exists (use --force to overwrite): {', '.join(existing)}")


def to_frames(video: torch.Tensor):
    """[1, 3, T, H, W] in [-1, 1] -> uint8 numpy [T, H, W, 3]."""
    v = video[0].detach().float().cpu().clamp(-1, 1)
    return ((v + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 3, 0).contiguous().numpy()


def write_mp4(frames, path: Path, fps: int, crf: int, label: str, pix_fmt: str = "yuv420p") -> None:
    """H.264 (yuv420p plays everywhere); written to a temp name and renamed."""
    import av  # lazy: not on the measuring path, and not installed on the GPU machine

    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with av.open(str(tmp), mode="w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=fps)
            stream.height, stream.width = frames.shape[1], frames.shape[2]
            stream.pix_fmt = pix_fmt
            stream.options = {"crf": str(crf)}
            bar = Progress(label, len(frames))
            for frame in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
                bar.step()
            for packet in stream.encode():
                container.mux(packet)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def timed(fn, z: torch.Tensor, device: str) -> tuple[torch.Tensor, float]:
    machine.sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        out = fn(z)
    machine.sync(device)
    return out, time.perf_counter() - start


def decode(args: argparse.Namespace) -> tuple[dict[str, Any], torch.Tensor]:
    """Decode and write the files; returns the facts and the decoded video (on the CPU)."""
    goals = _common.load_goals()
    z = load_latent(args.latent, goals, args.preset_free)
    outs = output_paths(args.out, args.compare)
    check_outputs(outs, args.force)
    device = args.device or machine.default_device()
    candidate = args.candidate or _common.root() / goals["candidate"]
    if not candidate.is_file():
        raise Refused(f"candidate file not found: {candidate}")

    print("stage 1/3: load model", file=sys.stderr)
    vae = _common.load_adapter(goals).load_model(device)
    z = z.to(device)
    facts: dict[str, Any] = {"latent": str(args.latent), "shape": list(z.shape), "device": device,
                             "gpu": machine.env_info(device)["gpu"], "candidate": str(candidate)}
    reference = None
    if args.compare:  # before the candidate is imported: a candidate may monkeypatch the model
        reference, facts["reference_s"] = timed(vae.decode, z, device)
        reference = reference.cpu()

    print("stage 2/3: build + decode", file=sys.stderr)
    start = time.perf_counter()
    build, _ = _common.load_candidate(candidate, goals)
    forward_fn, info = build(vae, z.clone())
    facts["build_s"] = time.perf_counter() - start
    facts["info"] = info
    if device == "cuda":
        _, facts["warmup_s"] = timed(forward_fn, z, device)
    video, facts["decode_s"] = timed(forward_fn, z, device)
    video = video.cpu()
    print(f"decoded {tuple(video.shape)} in {facts['decode_s']:.3f} s", file=sys.stderr)

    print("stage 3/3: encode mp4", file=sys.stderr)
    frames = to_frames(video)
    write_mp4(frames, outs[0], args.fps, args.crf, "frames written")
    facts.update(out=str(outs[0]), frames=int(frames.shape[0]), height=int(frames.shape[1]),
                 width=int(frames.shape[2]), fps=args.fps)
    if reference is not None:
        facts.update(write_comparison(reference, video, outs[1], outs[2], goals, args))
    return facts, video


def write_comparison(reference: torch.Tensor, video: torch.Tensor, clip: Path, strip: Path,
                     goals: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from harness.ledger import plots

    verdict = _common.load_adapter(goals).compare(video, reference, goals["gate"])  # the target's own gate
    ref_frames, cand_frames = to_frames(reference), to_frames(video)
    diffs = [plots.amplified_difference(r, c, AMPLIFY) for r, c in zip(ref_frames, cand_frames)]
    side_by_side = np.concatenate([ref_frames, cand_frames, np.stack(diffs)], axis=2)
    write_mp4(side_by_side, clip, args.fps, args.crf, "compare frames")
    worst = int((video - reference).abs().mean(dim=(0, 1, 3, 4)).argmax())  # the frame that differs most
    tmp = strip.with_name(f".{strip.stem}.tmp{os.getpid()}.png")
    try:
        plots.quality_strip(reference[0, :, worst], video[0, :, worst], tmp, amplify=AMPLIFY,
                            title=f"frame {worst}: {goals.quality_name} {verdict['quality']:.2f}, "
                                  f"max abs {verdict['max_abs']:.2e} (whole clip)")
        os.replace(tmp, strip)
    finally:
        tmp.unlink(missing_ok=True)
    return {"compare_out": str(clip), "strip_out": str(strip), "strip_frame": worst,
            "quality": verdict["quality"], "max_abs": verdict["max_abs"], "gate_passed": verdict["passed"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("latent", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fps", type=int, default=24)
    parser.add_argument("--crf", type=int, default=18, help="x264 quality, 0 = lossless luma/chroma planes")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")
    parser.add_argument("--preset-free", action="store_true", help="accept latents of any shape")
    parser.add_argument("--candidate", type=Path, default=None)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    args = parser.parse_args(argv)
    if args.fps < 1 or not 0 <= args.crf <= 51:
        print("error: --fps must be >= 1 and --crf in 0..51", file=sys.stderr)
        return 1
    try:
        facts, _ = decode(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Refused as e:
        print(f"setup error: {e}", file=sys.stderr)
        return 2
    console.emit([f"wrote {facts['out']}: {facts['frames']} frames {facts['width']}x{facts['height']}, "
                  f"decode {facts['decode_s']:.3f} s on {facts['gpu']}"], facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
