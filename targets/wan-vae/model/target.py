"""The adapter between the generic harness and this target (named by goals.json "adapter").

The harness knows nothing about VAEs: it loads the model, makes inputs, runs the reference and
counts FLOPs through these functions. Retarget the harness by writing another module with
the same functions and pointing goals.json at it. `compare` is the target's gate. Optional:
`frames` (without it run_experiment draws no quality strip), `flops` and `peak_probes` (the
floor, harness/decide/floor.py), `build_split` (the presets of several ranks), `input_from_clip` and
`render_clip` (make_latent's clips: model/clip.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from . import load_vae, weights_kind as _weights_kind
from .clip import encode_video, read_source, render_synthetic_clip
from .vae import WanVAE
from .weights import CHECKPOINT, synthetic_id
from harness.hashing import sha256_file
from harness.worker.tensor_checks import gate_verdict, output_mismatch

# Compared in pieces of this many elements: a 720p clip is 327 M of them, and a whole fp64 copy of
# the difference would need 2.6 GB on the device.
_CHUNK = 1 << 24


def load_model(device: str | torch.device = "cpu") -> WanVAE:
    """The frozen model in fp32 on `device` (weights as load_vae picks them)."""
    return load_vae(device=device)


def weights_kind() -> str:
    return _weights_kind()


def weights_id() -> str:
    """Which weights the references were made with: the checkpoint file's sha256, or the name of
    the seeded synthetic weights."""
    return sha256_file(CHECKPOINT) if _weights_kind() == "published" else synthetic_id()


def compare(out: torch.Tensor, ref: torch.Tensor, gate: dict) -> dict:
    """The gate for a video: PSNR over the value range and the largest absolute difference, on
    whatever device the tensors are. `ref` may be stored in lower precision (the pool)."""
    facts = {"passed": False, "reason": "", "quality": None, "max_abs": None}
    facts["reason"] = output_mismatch(out, ref.shape, torch.float32, "expected") or ""
    if facts["reason"]:
        return facts
    sq = torch.zeros((), dtype=torch.float64, device=out.device)
    worst = torch.zeros((), dtype=torch.float32, device=out.device)
    finite = torch.ones((), dtype=torch.bool, device=out.device)
    for o, r in zip(out.detach().reshape(-1).split(_CHUNK), ref.reshape(-1).split(_CHUNK)):
        d = o - r.to(o.dtype)
        finite &= torch.isfinite(o).all()
        sq += d.double().square().sum()
        worst = torch.maximum(worst, d.abs().max())
    if not bool(finite):
        facts["reason"] = "output has NaN or Inf"
        return facts
    lo, hi = gate["value_range"]
    mse = float(sq) / max(out.numel(), 1)
    facts["max_abs"] = float(worst)
    facts["quality"] = float("inf") if mse == 0 else 10 * math.log10((hi - lo) ** 2 / mse)
    return gate_verdict(facts, [
        (facts["quality"] < gate["min_psnr_db"], f"PSNR {facts['quality']:.2f} dB < {gate['min_psnr_db']} dB"),
        (facts["max_abs"] > gate["max_abs"], f"max abs diff {facts['max_abs']:.4f} > {gate['max_abs']}")])


def make_input(shape: list[int], seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """A seeded normalized latent: standard normal, as the diffusion model emits. numpy's PCG64
    takes the whole seed (torch's CPU generator keeps only its low 32 bits: 2^32 inputs in all)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.standard_normal(tuple(shape), dtype=np.float32)).to(device)


def reference(model: WanVAE, x: torch.Tensor) -> torch.Tensor:
    """The frozen forward pass that candidates must reproduce."""
    return model.decode(x)


def output_shape(shape: list[int]) -> list[int]:
    b, _, t, h, w = shape
    return [b, 3, 1 + 4 * (t - 1), 16 * h, 16 * w]


def build_split(build, model: WanVAE, example: torch.Tensor, group):
    """A decode split in space across the ranks of `group` (integrations/split_decode.py): each
    rank runs the candidate's own decoder (`build`) on its slab of the frame, the halo rows
    exchanged; the video is gathered on rank 0, the others get None."""
    from integrations.split_decode import build_split_decoder

    return build_split_decoder(build, model, example, group=group)


def input_from_clip(shape: list[int], clip: str | None, start_s: float | None, device: str,
                    model: WanVAE | None = None) -> tuple[torch.Tensor, dict]:
    """The preset's latent encoded from a video file, or (clip None) from Tears of Steel, and the
    facts that name the clip. The model is loaded only once the clip has been read."""
    _, _, frames, height, width = output_shape(shape)
    video, facts = read_source(clip, start_s, frames, height, width)
    model = model if model is not None else load_model(device)
    return encode_video(model, video, device, shape), facts


def render_clip(path: Path, shape: list[int]) -> None:
    """A procedural clip the size of the preset's video, written to `path`."""
    _, _, frames, height, width = output_shape(shape)
    render_synthetic_clip(Path(path), frames, height, width)


def flops(shape: list[int]) -> float:
    """FLOPs of one reference pass (counted on the meta device, so it costs no compute)."""
    with torch.device("meta"):
        model = WanVAE()
        x = torch.empty(*shape)
    counter = FlopCounterMode(display=False)
    with counter:
        model.decode(x)
    return float(counter.get_total_flops())


# The decode's three main convolutions (of the streaming fast path: 3 latent frames a pass, so 12
# new frames + 2 of history): input [1, C, T, H, W] -> C channels, 3x3x3, padding (0, 1, 1).
_PROBE_SHAPES = {"cuda": [(256, 14, 352, 640), (512, 14, 176, 320), (1024, 8, 88, 160)],
                 "cpu": [(64, 6, 32, 32)]}


def peak_probes(device: str) -> list[dict]:
    """The floor's probes for this target (harness/decide/floor.py): conv3d as the decode runs it, in
    bf16 channels-last on a GPU (fp32 on a CPU), through torch and, where nvidia-cudnn-frontend is
    installed, through cuDNN's graph API with its heuristics' first engine (faster than any torch
    offers on an H100). Each: name, FLOPs of one run, the run."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    probes = []
    for c, t, h, w in _PROBE_SHAPES[device]:
        x = torch.randn(1, c, t, h, w, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last_3d)
        k = torch.randn(c, c, 3, 3, 3, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last_3d)
        name = f"conv3d {c}->{c} 3x3x3 on {t}x{h}x{w} {str(dtype).replace('torch.', '')} channels-last"
        work = 2.0 * c * c * 27 * (t - 2) * h * w
        probes.append({"name": name, "work": work,
                       "fn": lambda x=x, k=k: torch.nn.functional.conv3d(x, k, padding=(0, 1, 1))})
        graph_api = _graph_api_conv(x, k) if device == "cuda" else None
        if graph_api is not None:
            probes.append({"name": f"{name}, cuDNN graph API", "work": work, "fn": graph_api})
    return probes


def _graph_api_conv(x: torch.Tensor, k: torch.Tensor):
    """A run of conv3d(x, k, padding (0, 1, 1)) through cuDNN's graph API (bf16 in and out, fp32
    accumulation), its heuristics' first plan; None without nvidia-cudnn-frontend."""
    try:
        import cudnn
    except (ImportError, OSError):
        return None
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    bf16 = cudnn.data_type.BFLOAT16
    y = torch.nn.functional.conv3d(x, k, padding=(0, 1, 1))
    g = cudnn.pygraph(io_data_type=bf16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    X = g.tensor(name="X", dim=list(x.shape), stride=list(x.stride()), data_type=bf16)
    W = g.tensor(name="W", dim=list(k.shape), stride=list(k.stride()), data_type=bf16)
    Y = g.conv_fprop(image=X, weight=W, padding=[0, 1, 1], stride=[1, 1, 1], dilation=[1, 1, 1])
    Y.set_output(True).set_data_type(bf16).set_dim(list(y.shape)).set_stride(list(y.stride()))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    ws = torch.empty(max(g.get_workspace_size(), 1), device=x.device, dtype=torch.uint8)
    return lambda: g.execute({X: x, W: k, Y: y}, ws, handle=handle)


def frames(output: torch.Tensor) -> torch.Tensor:
    """The output as pictures, [N, 3, H, W] in [-1, 1]: the frames of the first video."""
    return output[0].transpose(0, 1)
