"""Buffers that the harness and the worker both see: the input handed over, the output handed back.

Only these two buffers cross the trust boundary. Each is its own allocation, made for this purpose
and holding nothing else, so mapping it shows the worker nothing the harness did not put there.

- CPU: an anonymous memfd, mapped by both processes (the worker inherits the descriptor).
- CUDA: a cuMemAlloc allocation of its own, shared by a CUDA IPC handle (the driver API through
  ctypes: libcuda ships with every NVIDIA driver, so this needs no extra package). Copies in and
  out stay on the device: moving a 1.3 GB 720p clip costs about a millisecond.

`spec()` is what the worker needs to map a buffer (JSON-safe); `attach(spec)` maps it there.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

import torch

_CU_IPC_LAZY_ENABLE_PEER_ACCESS = 1


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def _cuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    for name, args in (("cuMemAlloc_v2", [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]),
                       ("cuMemFree_v2", [ctypes.c_uint64]),
                       ("cuIpcGetMemHandle", [ctypes.POINTER(_IpcHandle), ctypes.c_uint64]),
                       ("cuIpcOpenMemHandle_v2", [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint]),
                       ("cuIpcCloseMemHandle", [ctypes.c_uint64])):
        getattr(lib, name).argtypes = args
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with CUDA driver error {status}")


class _DeviceArray:
    """A raw device pointer in the form torch.as_tensor understands (__cuda_array_interface__)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2}


def _as_tensor(raw: torch.Tensor, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    return raw.view(dtype).view(shape)


def _nbytes(shape: list[int], dtype: torch.dtype) -> int:
    n = torch.empty((), dtype=dtype).element_size()
    for s in shape:
        n *= s
    return max(n, 1)


class SharedBuffer:
    """Made by the harness. `tensor` is its view; `spec()` goes to the worker; `close()` frees it."""

    def __init__(self, shape: list[int], dtype: torch.dtype, device: str) -> None:
        self.shape, self.dtype, self.device = list(shape), dtype, device
        nbytes = _nbytes(shape, dtype)
        self._fd, self._ptr, self._map = -1, 0, None
        if device == "cuda":
            torch.cuda.init()
            torch.empty(1, device="cuda")  # makes torch's primary context current for the driver calls
            self._lib = _cuda()
            ptr = ctypes.c_uint64()
            _check(self._lib.cuMemAlloc_v2(ctypes.byref(ptr), nbytes), "cuMemAlloc")
            self._ptr = ptr.value
            handle = _IpcHandle()
            _check(self._lib.cuIpcGetMemHandle(ctypes.byref(handle), self._ptr), "cuIpcGetMemHandle")
            self._handle = ctypes.string_at(ctypes.addressof(handle), 64)  # all 64 bytes, NULs too
            raw = torch.as_tensor(_DeviceArray(self._ptr, nbytes), device="cuda")
        else:
            self._fd = os.memfd_create("auto-optim-buffer", 0)
            os.ftruncate(self._fd, nbytes)
            self._map = mmap.mmap(self._fd, nbytes)
            raw = torch.frombuffer(self._map, dtype=torch.uint8)
        self.tensor = _as_tensor(raw, self.shape, dtype)

    @property
    def fd(self) -> int:
        """The descriptor the worker must inherit (CPU buffers; -1 on CUDA)."""
        return self._fd

    def spec(self) -> dict[str, Any]:
        spec = {"shape": self.shape, "dtype": str(self.dtype).removeprefix("torch."), "device": self.device,
                "nbytes": _nbytes(self.shape, self.dtype)}
        if self.device == "cuda":
            spec["ipc_handle"] = self._handle.hex()
        else:
            spec["fd"] = self._fd
        return spec

    def close(self) -> None:
        self.tensor = None
        if self._ptr:
            torch.cuda.synchronize()
            self._lib.cuMemFree_v2(self._ptr)
            self._ptr = 0
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a view is still alive somewhere; the mapping goes with the process
            os.close(self._fd)
            self._map, self._fd = None, -1


def attach(spec: dict[str, Any]) -> torch.Tensor:
    """The worker's view of a buffer the harness made (it lives as long as the worker)."""
    dtype = getattr(torch, spec["dtype"])
    if spec["device"] == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        lib = _cuda()
        handle = _IpcHandle()
        ctypes.memmove(ctypes.addressof(handle), bytes.fromhex(spec["ipc_handle"]), 64)
        ptr = ctypes.c_uint64()
        _check(lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, _CU_IPC_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        raw = torch.as_tensor(_DeviceArray(ptr.value, spec["nbytes"]), device="cuda")
    else:
        raw = torch.frombuffer(mmap.mmap(spec["fd"], spec["nbytes"]), dtype=torch.uint8)
    return _as_tensor(raw, spec["shape"], dtype)
