"""The VAE's input from a real video: frames read with PyAV, fitted to the preset's video size,
encoded by the frozen VAE in strict fp32 (model/target.py's input_from_clip and render_clip,
which harness/target/make_latent.py calls).

The VAE's own clip is the CC-BY Tears of Steel film (Blender Foundation), streamed over HTTP
from a start drawn in secret; a procedural clip (render_synthetic_clip) stands in offline.
A bad clip is a Refused with one line.
"""

from __future__ import annotations

import errno
import math
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from harness.hashing import sha256_file, sha256_tensor
from harness.target.assets import strict_fp32
from harness.errors import Refused

# Tears of Steel (c) Blender Foundation, mango.blender.org, CC-BY 3.0. The 1080p cut is 1920x800,
# tall enough for the full preset's 704 rows (the 720p cut is only 534 rows).
TEARS_OF_STEEL_URL = "https://download.blender.org/demo/movies/ToS/tears_of_steel_1080p.mov"
# What a URL that cannot be reached raises through PyAV (EIO: its HTTP reader offline).
UNREACHABLE = {errno.EIO, errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.ENETUNREACH,
               errno.EHOSTUNREACH}
TEARS_OF_STEEL_STARTS_S = (60.0, 600.0)  # past the titles; the default clip starts somewhere here, drawn in secret
NETWORK_TIMEOUT_S = 15


def _import_av() -> ModuleType:
    try:
        import av  # lazy: the GPU machine may not have PyAV
    except ImportError:
        raise Refused("PyAV is not installed (pip install av); use --seeded") from None
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
    except OSError as e:  # PyAV says EIO for a URL it cannot reach (no network) and repeats the URL
        if "://" in source and not source.startswith("file:") and e.errno in UNREACHABLE:
            raise Refused(f"cannot download clip {source}: offline, or its server did not answer "
                          f"({e.strerror or type(e).__name__})") from None
        raise Refused(f"cannot open clip {source}: {e.strerror or e}".replace("\n", " ")) from None
    except Exception as e:  # noqa: BLE001 - PyAV raises many kinds; all mean "cannot read"
        raise Refused(f"cannot open clip {source}: {type(e).__name__}: {e}".replace("\n", " ")) from None
    with container:
        if not container.streams.video:
            raise Refused(f"{source} has no video stream")
        stream = container.streams.video[0]
        if start_s > 0 and stream.time_base:
            container.seek(int(start_s / stream.time_base), stream=stream)
        picked: list[np.ndarray] = []
        try:
            for frame in container.decode(stream):
                if frame.time is not None and frame.time < start_s - 1e-6:
                    continue  # seeking lands on the keyframe before start_s
                if frame.height < height or frame.width < width:
                    raise Refused(f"clip frames are {frame.width}x{frame.height}; the preset needs "
                                     f"at least {width}x{height}")
                picked.append(_fit(frame.to_ndarray(format="rgb24"), height, width, av))
                if len(picked) == frames:
                    break
        except Refused:
            raise
        except Exception as e:  # noqa: BLE001
            raise Refused(f"cannot decode clip {source}: {type(e).__name__}: {e}".replace("\n", " ")) from None
    if len(picked) < frames:
        raise Refused(f"clip {source} has {len(picked)} frames after {start_s} s; the preset needs {frames}")
    video = torch.from_numpy(np.stack(picked)).permute(3, 0, 1, 2).unsqueeze(0)  # [1, 3, T, H, W]
    return video.float() / 127.5 - 1.0


def read_source(clip: str | None, start_s: float | None, frames: int, height: int,
                width: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """The video from a clip file, or (clip None) from Tears of Steel, and the facts that name it."""
    if clip is None:
        low, high = TEARS_OF_STEEL_STARTS_S
        start = round(random.SystemRandom().uniform(low, high), 2) if start_s is None else start_s
        video = read_clip(TEARS_OF_STEEL_URL, frames, height, width, start, timeout_s=NETWORK_TIMEOUT_S)
        return video, {"source": f"clip:{TEARS_OF_STEEL_URL}", "start_s": start, "frames_sha256": sha256_tensor(video),
                       "license": "CC-BY 3.0, Blender Foundation"}
    src = Path(clip)
    if not src.is_file():
        raise Refused(f"clip file not found: {src}")
    start = start_s or 0.0
    video = read_clip(str(src), frames, height, width, start)
    return video, {"source": f"clip:{src}", "clip_sha256": sha256_file(src), "start_s": start}


def encode_video(model: torch.nn.Module, video: torch.Tensor, device: str, shape: list[int]) -> torch.Tensor:
    """The model's encode in strict fp32; the result must have the preset's latent shape."""
    with strict_fp32(), torch.no_grad():
        z = model.encode(video.to(device, torch.float32)).detach().to("cpu", torch.float32).contiguous()
    if list(z.shape) != list(shape):
        raise Refused(f"encoded latent has shape {list(z.shape)}, preset needs {list(shape)}")
    return z


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
