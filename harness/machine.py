"""The machine a number was measured on: its device, GPU name and versions (printed beside every
number and matched between rows), and the device's clock barrier. torch is imported by the
functions that ask it, so a tool that only reads rows (on_cpu: the ledger, --apply) loads none."""

from __future__ import annotations

import os
import platform
import re
from typing import Any


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def env_info(device: str, ranks: int = 1) -> dict[str, Any]:
    """GPU name and versions, printed beside every number. A worker group of `ranks` processes
    (one a GPU) is a machine of its own: "2x NVIDIA H100 80GB HBM3", so its rows are compared
    with its own kind only (ledger/rows.py matches rows by preset and gpu)."""
    import torch

    machine = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return {
        "device": device,
        "gpu": f"{ranks}x {machine}" if ranks > 1 else machine,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if device == "cuda" else None,
        "cudnn": torch.backends.cudnn.version() if device == "cuda" else None,
        "python": platform.python_version(),
    }


def on_cpu(gpu: str) -> bool:
    """Is env_info's "gpu" (a row's) a CPU, one process or a group of them?"""
    return re.sub(r"^\d+x ", "", gpu).startswith("CPU")


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
