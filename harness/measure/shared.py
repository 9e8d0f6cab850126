"""Buffers that the harness and the worker both see: the input handed over, the output handed back.

Only these two buffers cross the trust boundary. Each is its own allocation, made for this purpose
and holding nothing else, so mapping it shows the worker nothing the harness did not put there.

Either way the worker inherits a file descriptor: it crosses the sandbox's user, PID, network,
IPC and mount namespaces, where CUDA's legacy IPC handles do not (measured on an H100:
../shared/probes/gpu-fd-buffers in the design notes' repository).

- CPU: an anonymous memfd, sealed at its size (a worker that truncates it cannot make the
  harness fault when it touches the buffer), mapped by both processes.
- CUDA: device memory made with cuMemCreate and exported as a POSIX file descriptor
  (cuMemExportToShareableHandle), mapped into each process's address space (the driver API
  through ctypes: libcuda ships with every NVIDIA driver, so this needs no extra package). Copies
  in and out stay on the device: moving a 1.3 GB 720p clip costs about a millisecond.

`spec()` is what the worker needs to map a buffer (JSON-safe); `attach(spec)` maps it there.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from typing import Any

import torch

_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


def _cuda() -> ctypes.CDLL:
    u64, size = ctypes.c_uint64, ctypes.c_size_t
    lib = ctypes.CDLL("libcuda.so.1")
    for name, args in (("cuMemGetAllocationGranularity", [ctypes.POINTER(size), ctypes.POINTER(_AllocationProp), ctypes.c_int]),
                       ("cuMemCreate", [ctypes.POINTER(u64), size, ctypes.POINTER(_AllocationProp), u64]),
                       ("cuMemExportToShareableHandle", [ctypes.c_void_p, u64, ctypes.c_int, u64]),
                       ("cuMemImportFromShareableHandle", [ctypes.POINTER(u64), ctypes.c_void_p, ctypes.c_int]),
                       ("cuMemAddressReserve", [ctypes.POINTER(u64), size, size, u64, u64]),
                       ("cuMemMap", [u64, size, size, u64, u64]),
                       ("cuMemSetAccess", [u64, size, ctypes.POINTER(_AccessDesc), size]),
                       ("cuMemUnmap", [u64, size]),
                       ("cuMemAddressFree", [u64, size]),
                       ("cuMemRelease", [u64])):
        getattr(lib, name).argtypes = args
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with CUDA driver error {status}")


def _device_location() -> _Location:
    return _Location(_CU_MEM_LOCATION_TYPE_DEVICE, torch.cuda.current_device())


def _padded(nbytes: int, lib: ctypes.CDLL) -> int:
    """nbytes rounded up to the allocation granularity cuMemCreate and cuMemMap require."""
    prop = _AllocationProp(type=_CU_MEM_ALLOCATION_TYPE_PINNED, location=_device_location(),
                           requestedHandleTypes=_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    gran = ctypes.c_size_t()
    _check(lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), _CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           "cuMemGetAllocationGranularity")
    return -(-nbytes // gran.value) * gran.value


def _map(lib: ctypes.CDLL, handle: int, size: int) -> int:
    """Reserve an address range, map the allocation there, allow this device to read and write it."""
    ptr = ctypes.c_uint64()
    _check(lib.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0), "cuMemAddressReserve")
    _check(lib.cuMemMap(ptr.value, size, 0, handle, 0), "cuMemMap")
    access = _AccessDesc(location=_device_location(), flags=_CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    _check(lib.cuMemSetAccess(ptr.value, size, ctypes.byref(access), 1), "cuMemSetAccess")
    return ptr.value


def _cuda_context() -> ctypes.CDLL:
    torch.cuda.init()
    torch.empty(1, device="cuda")  # makes torch's primary context current for the driver calls
    return _cuda()


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
    """Made by the harness. `tensor` is its view; `spec()` and `fd` go to the worker; `close()` frees it."""

    def __init__(self, shape: list[int], dtype: torch.dtype, device: str) -> None:
        self.shape, self.dtype, self.device = list(shape), dtype, device
        nbytes = _nbytes(shape, dtype)
        self._fd, self._ptr, self._handle, self._map = -1, 0, 0, None
        if device == "cuda":
            self._lib = _cuda_context()
            self._size = _padded(nbytes, self._lib)
            prop = _AllocationProp(type=_CU_MEM_ALLOCATION_TYPE_PINNED, location=_device_location(),
                                   requestedHandleTypes=_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
            handle, fd = ctypes.c_uint64(), ctypes.c_int(-1)
            _check(self._lib.cuMemCreate(ctypes.byref(handle), self._size, ctypes.byref(prop), 0), "cuMemCreate")
            self._handle = handle.value
            _check(self._lib.cuMemExportToShareableHandle(ctypes.byref(fd), self._handle,
                                                          _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                   "cuMemExportToShareableHandle")
            self._fd = fd.value
            self._ptr = _map(self._lib, self._handle, self._size)
            raw = torch.as_tensor(_DeviceArray(self._ptr, nbytes), device="cuda")
        else:
            self._fd = os.memfd_create("auto-optim-buffer", os.MFD_ALLOW_SEALING)
            os.ftruncate(self._fd, nbytes)
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, _SEALS)
            self._map = mmap.mmap(self._fd, nbytes)
            raw = torch.frombuffer(self._map, dtype=torch.uint8)
        self.tensor = _as_tensor(raw, self.shape, dtype)

    @property
    def fd(self) -> int:
        """The descriptor the worker inherits."""
        return self._fd

    def spec(self) -> dict[str, Any]:
        """What the worker needs to map it, besides the descriptor (which it finds at a fixed number)."""
        return {"shape": self.shape, "dtype": str(self.dtype).removeprefix("torch."), "device": self.device,
                "nbytes": _nbytes(self.shape, self.dtype)}

    def close(self) -> None:
        self.tensor = None
        if self._ptr:
            torch.cuda.synchronize()
            self._lib.cuMemUnmap(self._ptr, self._size)
            self._lib.cuMemAddressFree(self._ptr, self._size)
            self._lib.cuMemRelease(self._handle)
            self._ptr = self._handle = 0
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a view is still alive somewhere; the mapping goes with the process
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def attach(spec: dict[str, Any], fd: int) -> torch.Tensor:
    """The worker's view of a buffer the harness made, from its descriptor (it lives as long as the worker)."""
    dtype = getattr(torch, spec["dtype"])
    if spec["device"] == "cuda":
        lib = _cuda_context()
        size = _padded(spec["nbytes"], lib)
        handle = ctypes.c_uint64()
        _check(lib.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                  _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle")
        raw = torch.as_tensor(_DeviceArray(_map(lib, handle.value, size), spec["nbytes"]), device="cuda")
    else:
        raw = torch.frombuffer(mmap.mmap(fd, spec["nbytes"]), dtype=torch.uint8)
    return _as_tensor(raw, spec["shape"], dtype)
