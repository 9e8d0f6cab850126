"""NVML, the driver's own library (libnvidia-ml.so.1, shipped with every NVIDIA driver), reached
through ctypes: what the harness asks the driver about a CUDA device rather than the worker (how
busy it is, who holds a context on it, which device node it is). None where NVML does not answer.
"""

from __future__ import annotations

import ctypes

NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE = 0, 7


def handle(device_index: int) -> tuple[ctypes.CDLL, ctypes.c_void_p] | None:
    """NVML and the handle of the CUDA device `device_index` as this process numbers it (found by
    its UUID, so CUDA_VISIBLE_DEVICES is respected), or None."""
    uuid = device_uuid(device_index)
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        found = ctypes.c_void_p()
        if uuid is None or lib.nvmlInit_v2() != NVML_SUCCESS \
                or lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(found)) != NVML_SUCCESS:
            return None
    except (OSError, AttributeError):  # no NVML, or one without these calls
        return None
    return lib, found


def device_uuid(device_index: int) -> str | None:
    """The CUDA device's UUID as CUDA_VISIBLE_DEVICES and NVML write it (GPU-...), or None."""
    try:
        import torch

        return f"GPU-{torch.cuda.get_device_properties(device_index).uuid}"
    except (AttributeError, RuntimeError, AssertionError):  # torch: AssertionError for no such device
        return None


def device_node(device_index: int) -> str | None:
    """The device node of the CUDA device (/dev/nvidiaN, N its minor number), or None (also for a
    MIG slice, which NVML does not find under a GPU- UUID)."""
    found = handle(device_index)
    if found is None:
        return None
    lib, dev = found
    minor = ctypes.c_uint()
    try:
        if lib.nvmlDeviceGetMinorNumber(dev, ctypes.byref(minor)) != NVML_SUCCESS:
            return None
    except AttributeError:
        return None
    return f"/dev/nvidia{minor.value}"


def processes(device_index: int) -> int:
    """How many processes hold a compute context on the CUDA device (this one included, once it
    has one); 1 where NVML cannot tell."""
    found = handle(device_index)
    if found is None:
        return 1
    lib, dev = found
    running = getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)  # drivers from R510 on
    if running is None:
        return 1
    count = ctypes.c_uint(0)  # asked with no room for their details, NVML says how many there are
    rc = running(dev, ctypes.byref(count), None)
    return int(count.value) if rc in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE) else 1
