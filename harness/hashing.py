"""sha256 of bytes, files and tensors: the digests records, assets and the frozen hash are made of."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_tensor(t: Any) -> str:
    """A tensor's bytes as stored (its dtype's, on the CPU, contiguous)."""
    import torch  # the caller holds a tensor, so torch is imported already; this module does not need it

    return sha256_bytes(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
