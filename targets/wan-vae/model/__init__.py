"""The frozen model: our Wan 2.2 VAE and `load_vae`, the one way the harness gets it."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from pathlib import Path

import torch

from .vae import LATENT_MEAN, LATENT_STD, StreamCache, WanVAE
from .weights import CHECKPOINT, download_checkpoint, synthetic_cache, synthetic_state_dict

__all__ = ["WanVAE", "StreamCache", "LATENT_MEAN", "LATENT_STD", "load_vae", "weights_kind",
           "download_checkpoint"]


def weights_kind(weights: str | Path | None = None) -> str:
    """'published' when a checkpoint file is used, 'synthetic' for the seeded stand-in."""
    if weights is None:
        return "published" if CHECKPOINT.exists() else "synthetic"
    return "synthetic" if str(weights) == "synthetic" else "published"


def load_vae(weights: str | Path | None = None, device: str | torch.device = "cpu",
             dtype: torch.dtype = torch.float32) -> WanVAE:
    """The frozen VAE in eval mode without gradients.

    weights: a checkpoint path; None for assets/Wan2.2_VAE.pth when present, else the seeded
    synthetic weights; "synthetic" to force those.
    """
    with torch.device("meta"):
        vae = WanVAE()
    if weights is None and CHECKPOINT.exists():
        weights = CHECKPOINT
    if weights is None or str(weights) == "synthetic":
        state = _synthetic(vae)
    else:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(f"weights file not found: {path}")
        state = torch.load(path, map_location="cpu", weights_only=True)
    vae.load_state_dict(state, strict=True, assign=True)
    # Buffers that are not in the checkpoint were created on meta; rebuild them for real.
    vae.latent_mean = torch.tensor(LATENT_MEAN)
    vae.latent_std = torch.tensor(LATENT_STD)
    return vae.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _no_room(folder: Path, state: dict[str, torch.Tensor]) -> str:
    """Why a cache of `state` does not fit in `folder`, writable by this process, or "" (it fits, or
    this process may not write there at all: a sandboxed worker's read-only view)."""
    try:
        if not os.access(folder, os.W_OK):
            return ""
        free = shutil.disk_usage(folder).free
    except OSError:
        return ""
    need = sum(t.numel() * t.element_size() for t in state.values())
    return f"{need / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free in {folder}" if free < need else ""


def _synthetic(vae: WanVAE) -> dict[str, torch.Tensor]:
    """The seeded weights, from the file cache when there is one; made (and cached, where this
    process may write) otherwise. A damaged cache that this process cannot write (a sandboxed
    worker) is an error that names the file and the command that remakes it."""
    cache = synthetic_cache()
    damaged = None
    if cache.is_file():
        try:
            return torch.load(cache, map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:  # noqa: BLE001 - any unreadable cache is remade below
            damaged = type(e).__name__
    state = synthetic_state_dict(vae)
    tmp = cache.with_name(f".{cache.name}.tmp{os.getpid()}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, tmp)  # a read-only folder raises RuntimeError here, not OSError
        os.replace(tmp, cache)
    except Exception as e:  # noqa: BLE001 - not writable here: use them uncached
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        room = _no_room(cache.parent, state)
        if room:  # torch.save says "unexpected pos" for a full disk: say what it is, wherever it happens
            raise OSError(errno.ENOSPC, f"No space left on device for the synthetic-weights cache ({room})",
                          str(cache)) from e
        if damaged:
            raise RuntimeError(f"the synthetic-weights cache {cache} is damaged ({damaged}) and this process "
                               f"cannot write it: run auto-optim prepare, which remakes it") from None
        return state
    if damaged:
        print(f"model: the synthetic-weights cache {cache} was damaged ({damaged}); made it again", file=sys.stderr)
    return state
