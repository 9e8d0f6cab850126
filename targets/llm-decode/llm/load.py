"""Build the frozen model: synthetic weights by default, the published checkpoint when present.

Both paths return a transformers Qwen2ForCausalLM in fp32, eval mode, gradients off. A
checkpoint is a directory as save_pretrained (or huggingface_hub's snapshot_download) writes it:
config.json and *.safetensors. Its architecture must match the spec, so a different model
dropped into assets/ is an error rather than a silently different target.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from .config import ARCH_KEYS, ModelSpec, hf_config
from .weights import code_hash, fill_synthetic_

# Drawing 0.5 B seeded values takes 10-15 s on a GPU host's CPU, and four workers doing it at once
# took twice that (a wave on an H200 host): made once, then loaded memory-mapped.
SYNTHETIC_CACHE = Path(__file__).resolve().parent.parent / "assets"


def _frozen(model: nn.Module) -> nn.Module:
    return model.float().eval().requires_grad_(False)


def synthetic_model(spec: ModelSpec, device: str | torch.device = "cpu") -> nn.Module:
    """The spec's model with deterministic synthetic weights (weights.py), made on `device`; the
    values come from a file cache when there is one, and are cached where this process may write."""
    from transformers import Qwen2ForCausalLM

    config = hf_config(spec)
    with torch.device("meta"):  # no random init: every value is written below
        model = Qwen2ForCausalLM(config)
    model.to_empty(device=device)
    model.tie_weights()  # to_empty made the tied head a parameter of its own again
    cache = SYNTHETIC_CACHE / f"synthetic-{spec.name}-{code_hash()}.pt"
    try:
        state = torch.load(cache, map_location="cpu", weights_only=True, mmap=True)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(state[name])
    except Exception as e:  # noqa: BLE001 - no cache, or a damaged one: draw the values
        damaged = None if isinstance(e, FileNotFoundError) else type(e).__name__
        fill_synthetic_(model, spec.logit_std)
        try:
            tmp = cache.with_name(f".{cache.name}.tmp")
            cache.parent.mkdir(parents=True, exist_ok=True)
            torch.save({n: p.detach().cpu() for n, p in model.named_parameters()}, tmp)
            tmp.replace(cache)
        except Exception:  # noqa: BLE001 - read-only here (a sandboxed worker; torch.save raises RuntimeError)
            if damaged:  # name the damaged file and what remakes it (a missing cache: use them uncached)
                raise RuntimeError(f"the synthetic-weights cache {cache} is damaged ({damaged}) and this process "
                                   f"cannot write it: run auto-optim prepare, which remakes it") from None
    with torch.device(device):  # to_empty left the RoPE frequencies uninitialized
        model.model.rotary_emb = type(model.model.rotary_emb)(config)
    return _frozen(model)


def has_checkpoint(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def check_architecture(spec: ModelSpec, path: Path) -> None:
    cfg = json.loads((path / "config.json").read_text())
    wrong = {k: (cfg.get(k), spec.config[k]) for k in ARCH_KEYS if cfg.get(k) != spec.config[k]}
    if cfg.get("model_type") != "qwen2" or wrong:
        raise ValueError(f"{path} is not {spec.name}: model_type {cfg.get('model_type')!r}, "
                         f"(found, expected) {wrong}")


def published_model(spec: ModelSpec, path: Path, device: str | torch.device = "cpu") -> nn.Module:
    """The checkpoint in `path`, upcast to fp32 (Qwen2.5 is published in bf16)."""
    from transformers import Qwen2ForCausalLM

    check_architecture(spec, path)
    model = Qwen2ForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    return _frozen(model.to(device))


@functools.lru_cache(maxsize=4)
def _files_sha256(files: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for name, _, _ in files:
        with open(name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def checkpoint_sha256(path: Path) -> str:
    """sha256 over the checkpoint's weight files, hashed once per process (keyed by size, mtime)."""
    files = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(path.glob("*.safetensors")))
    return _files_sha256(files)
