"""Make the fixed input latent for a preset: a real clip encoded by the frozen VAE, or a seeded latent.

Usage:
    python harness/make_latent.py [--preset P] [--device D] [--force]     # the target's own source
    python harness/make_latent.py --seeded                 # seeded latent (a secret seed)
    python harness/make_latent.py --clip video.mp4 [--start S]   # any video file (PyAV)
    python harness/make_latent.py --synthetic-clip         # render a procedural clip offline, encode it

The clip path decodes frames with PyAV, resizes and center-crops them to the preset's video size
(the adapter's output_shape of the preset's input shape), maps them to [-1, 1] and encodes them
with the model's `encode` in strict fp32. The default source is the target's (goals.json
"input_source"): "clip" (the VAE's) is the CC-BY Tears of Steel film (Blender Foundation), streamed
over HTTP from --start seconds, falling back to the seeded latent with a note on stderr when the
network or PyAV is not there; anything else, or no key (an LLM's token ids, a toy's tensor), the
seeded input. A clip needs a target whose output is a video ([B, 3, T, H, W]) and whose model encodes.

Writes assets/input_<preset>.pt = {"input": fp32 tensor, "meta": {source, seed, sha256, shape,
preset, weights_kind, clip_sha256, ...}} atomically; refuses to overwrite it without --force.
Exit 0 on success, 2 on any bad input (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # see harness/__init__.py
import numpy as np  # noqa: E402
import torch  # noqa: E402

from harness import _common  # noqa: E402
from harness.assets import strict_fp32  # noqa: E402

# Tears of Steel (c) Blender Foundation, mango.blender.org, CC-BY 3.0. The 1080p cut is 1920x800,
# tall enough for the full preset's 704 rows (the 720p cut is only 534 rows).
TEARS_OF_STEEL_URL = "https://download.blender.org/demo/movies/ToS/tears_of_steel_1080p.mov"
TEARS_OF_STEEL_STARTS_S = (60.0, 600.0)  # past the titles; the default clip starts somewhere here, drawn in secret
NETWORK_TIMEOUT_S = 15


class InputError(_common.SetupError):
    """A bad clip or latent: one line on stderr, exit 2, nothing written."""


def video_size(adapter: ModuleType, shape: list[int]) -> tuple[int, int, int]:
    """(frames, height, width) of the video whose encoding has the preset's latent shape."""
    out = adapter.output_shape(list(shape))
    if len(out) != 5 or int(out[1]) != 3:
        raise InputError(f"this target's output {list(out)} is not a video [B, 3, T, H, W], so no clip can make its "
                         f"input; use the seeded one (make_latent.py --seeded)")
    return int(out[2]), int(out[3]), int(out[4])


def default_mode(goals: dict[str, Any]) -> str:
    """The target's own source of its input: a clip where goals.json says so, else seeded."""
    return "default" if goals.get("input_source") == "clip" else "seeded"


def _import_av() -> ModuleType:
    try:
        import av  # lazy: the GPU machine may not have PyAV
    except ImportError:
        raise InputError("PyAV is not installed (pip install av); use --seeded") from None
    return av


def _fit(rgb: np.ndarray, height: int, width: int, av: ModuleType) -> np.ndarray:
    """Resize (keeping the aspect ratio) so the frame covers height x width, then center-crop."""
    h, w = rgb.shape[:2]
    scale = max(height / h, width / w)
    nh, nw = max(height, math.ceil(h * scale)), max(width, math.ceil(w * scale))
    if (nh, nw) != (h, w):
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        rgb = frame.reformat(width=nw, height=nh, interpolation="AREA").to_ndarray(format="rgb24")
    top, left = (nh - height) // 2, (nw - width) // 2
    return rgb[top:top + height, left:left + width]


def read_clip(source: str, frames: int, height: int, width: int, start_s: float = 0.0,
              timeout_s: float | None = None) -> torch.Tensor:
    """Decode `frames` frames from `source` (file or URL) -> [1, 3, T, H, W] fp32 in [-1, 1].

    Frames smaller than the target are refused rather than upscaled (that would not be video).
    """
    av = _import_av()
    options = {"rw_timeout": str(int(timeout_s * 1e6)), "timeout": str(int(timeout_s * 1e6))} if timeout_s else {}
    try:
        container = av.open(source, options=options)
    except Exception as e:  # noqa: BLE001 - PyAV raises many kinds; all mean "cannot read"
        raise InputError(f"cannot open clip {source}: {type(e).__name__}: {e}".replace("\n", " ")) from None
    with container:
        if not container.streams.video:
            raise InputError(f"{source} has no video stream")
        stream = container.streams.video[0]
        if start_s > 0 and stream.time_base:
            container.seek(int(start_s / stream.time_base), stream=stream)
        picked: list[np.ndarray] = []
        try:
            for frame in container.decode(stream):
                if frame.time is not None and frame.time < start_s - 1e-6:
                    continue  # seeking lands on the keyframe before start_s
                if frame.height < height or frame.width < width:
                    raise InputError(f"clip frames are {frame.width}x{frame.height}; the preset needs "
                                     f"at least {width}x{height}")
                picked.append(_fit(frame.to_ndarray(format="rgb24"), height, width, av))
                if len(picked) == frames:
                    break
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001
            raise InputError(f"cannot decode clip {source}: {type(e).__name__}: {e}".replace("\n", " ")) from None
    if len(picked) < frames:
        raise InputError(f"clip {source} has {len(picked)} frames after {start_s} s; the preset needs {frames}")
    video = torch.from_numpy(np.stack(picked)).permute(3, 0, 1, 2).unsqueeze(0)  # [1, 3, T, H, W]
    return video.float() / 127.5 - 1.0


def render_synthetic_clip(path: Path, frames: int, height: int, width: int, fps: int = 24) -> None:
    """A procedural clip (gradient, moving shapes, rows of text-like blocks) encoded with PyAV."""
    av = _import_av()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    with av.open(str(tmp), "w") as out:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "12"} if codec == "libx264" else {"qscale": "2"}
        for t in range(frames):
            phase = t / max(frames, 1)
            img = np.empty((height, width, 3), np.float32)
            img[..., 0] = 255 * (xx / width + phase) % 256  # a sliding gradient
            img[..., 1] = 255 * yy / height
            img[..., 2] = 128 + 100 * np.sin(2 * np.pi * (xx / width * 2 + yy / height + phase))
            cy, cx, r = height * (0.3 + 0.4 * phase), width * (0.2 + 0.6 * phase), 0.2 * min(height, width)
            img[(yy - cy) ** 2 + (xx - cx) ** 2 < r**2] = (240, 220, 40)  # a moving disc
            y0, x0 = int(height * 0.6), int(width * (0.7 - 0.5 * phase))
            img[y0:y0 + height // 5, max(x0, 0):max(x0, 0) + width // 4] = (30, 60, 200)  # a moving box
            bh, bw = max(height // 32, 1), max(width // 24, 1)
            for row in range(3):  # "text": rows of small dark blocks scrolling up
                yt = int(height * 0.1 + row * 2.5 * bh - t) % height
                for col in range(0, width - bw, 2 * bw):
                    if (col // (2 * bw) + row) % 3:
                        img[yt:yt + bh, col:col + bw] = 16
            frame = av.VideoFrame.from_ndarray(np.clip(img, 0, 255).astype(np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    tmp.replace(path)


def encode_video(model: torch.nn.Module, video: torch.Tensor, device: str, shape: list[int]) -> torch.Tensor:
    """The model's encode in strict fp32; the result must have the preset's latent shape."""
    encode = getattr(model, "encode", None)
    if not callable(encode):
        raise InputError(f"{type(model).__name__} has no encode(); this target cannot encode clips, use --seeded")
    with strict_fp32(), torch.no_grad():
        z = encode(video.to(device, torch.float32)).detach().to("cpu", torch.float32).contiguous()
    if list(z.shape) != list(shape):
        raise InputError(f"encoded latent has shape {list(z.shape)}, preset needs {list(shape)}")
    return z


def secret_seed() -> int:
    """A seed drawn from os.urandom and kept only in the input's own asset, which the candidate's
    worker cannot read: a benchmark input made from a public seed (or a public clip at a known
    time) could be rebuilt and decoded by a candidate before the clock starts."""
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def seeded(adapter: ModuleType, shape: list[int], seed: int) -> torch.Tensor:
    return adapter.make_input(list(shape), seed, "cpu").contiguous()


def run(preset: str | None = None, mode: str = "default", clip: str | None = None, start_s: float | None = None,
        device: str | None = None, force: bool = False, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """Make and save the latent. mode: default | seeded | clip | synthetic-clip.
    `model` lets tests reuse an already loaded model."""
    goals = _common.load_goals()
    adapter = _common.load_adapter(goals)
    device = device or _common.default_device()
    preset = _common.pick_preset(goals, preset, device)
    mode = default_mode(goals) if mode == "default" else mode
    path = _common.input_path(preset)
    if path.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it")
    shape = list(goals["presets"][preset]["input_shape"])
    meta: dict[str, Any] = {"preset": preset, "shape": shape, "seed": None, "clip_sha256": None,
                            "weights_kind": adapter.weights_kind()}

    video = None
    if mode != "seeded":  # a clip needs a target whose input encodes a video (the VAE's latent)
        frames, height, width = video_size(adapter, shape)
    if mode == "clip":
        src = Path(clip or "")
        if not src.is_file():
            raise InputError(f"clip file not found: {src}")
        start = start_s or 0.0
        video = read_clip(str(src), frames, height, width, start)
        meta.update(source=f"clip:{src}", clip_sha256=_common.sha256_file(src), start_s=start)
    elif mode == "synthetic-clip":
        src = _common.assets_dir() / f"synthetic_{preset}.mp4"
        render_synthetic_clip(src, frames, height, width)
        video = read_clip(str(src), frames, height, width)
        meta.update(source="synthetic-clip", clip_path=str(src), clip_sha256=_common.sha256_file(src), start_s=0.0)
    elif mode == "default":
        low, high = TEARS_OF_STEEL_STARTS_S
        start = round(low + (high - low) * secret_seed() / (1 << 63), 2) if start_s is None else start_s
        try:
            video = read_clip(TEARS_OF_STEEL_URL, frames, height, width, start, timeout_s=NETWORK_TIMEOUT_S)
            meta.update(source=f"clip:{TEARS_OF_STEEL_URL}", start_s=start,
                        frames_sha256=_common.sha256_tensor(video), license="CC-BY 3.0, Blender Foundation")
        except InputError as e:
            print(f"make_latent: note: Tears of Steel unavailable ({e}); using the seeded latent", file=sys.stderr)

    if video is None:
        seed = secret_seed()
        z = seeded(adapter, shape, seed)
        meta.update(source="seeded", seed=seed)
    else:
        model = model if model is not None else adapter.load_model(device)
        z = encode_video(model, video, device, shape)
    if z.is_floating_point() and not torch.isfinite(z).all():
        raise InputError("latent has NaN or Inf")
    meta["sha256"] = _common.sha256_tensor(z)
    _common.save_tensor_atomic({"input": z, "meta": meta}, path)
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
    except _common.SetupError as e:
        print(f"make_latent: {str(e).strip().splitlines()[0]}", file=sys.stderr)  # one line
        return 2
    _common.emit([f"latent for preset {facts['preset']}: {facts['shape']} from {facts['source']} -> {facts['path']}"], facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
