"""Cheater (GPU only): asks NVML, from inside the worker, to change the GPU's state: lock its
clocks (nvmlDeviceSetGpuLockedClocks), set its application clocks, lower its power limit. The
GPU's state is not the worker's: it outlives the worker and holds while the worker is frozen, so
a candidate that throttles the GPU after each of its calls and lifts the throttle at the start of
the next slows its rival's (the keeper's) calls, up to the keep rule's 10% guard, and a worker
that leaves it throttled slows the next experiment's baseline and keepers. The worker is the host's
root user (uid 0 inside maps to uid 0 outside when the harness runs as root) and has the GPU's
device node open. It also lists the GPU's other processes (nvmlDeviceGetComputeRunningProcesses:
the harness's and the rival worker's, with their memory), which a PID namespace does not hide
from the driver. Whatever it manages to set it resets before it returns. Its outputs are honest.

Would be stopped by: the driver's own check (privileged NVML calls need CAP_SYS_ADMIN in the
host's user namespace, which the worker lacks). The test (on a GPU) checks that every setter was
refused."""

import ctypes
import os

from _target import honest

NVML_CLOCK_GRAPHICS = 0


def _nvml():
    for name in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def tamper() -> dict:
    lib = _nvml()
    if lib is None:
        return {"nvml": "not found"}
    said: dict = {"init": lib.nvmlInit_v2()}
    handle = ctypes.c_void_p()
    said["handle"] = lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
    if said["handle"] != 0:
        return said
    count = ctypes.c_uint(64)
    mems = (ctypes.c_uint * 64)()
    lib.nvmlDeviceGetSupportedMemoryClocks(handle, ctypes.byref(count), mems)
    mem = mems[0] if count.value else 0
    count = ctypes.c_uint(512)
    gfx = (ctypes.c_uint * 512)()
    lib.nvmlDeviceGetSupportedGraphicsClocks(handle, ctypes.c_uint(mem), ctypes.byref(count), gfx)
    low = min(gfx[:count.value]) if count.value else 300
    said["lowest_clock_mhz"] = low
    rc = lib.nvmlDeviceSetGpuLockedClocks(handle, ctypes.c_uint(low), ctypes.c_uint(low))
    said["set_locked_clocks"] = rc
    if rc == 0:
        said["reset_locked_clocks"] = lib.nvmlDeviceResetGpuLockedClocks(handle)
    rc = lib.nvmlDeviceSetApplicationsClocks(handle, ctypes.c_uint(mem), ctypes.c_uint(low))
    said["set_application_clocks"] = rc
    if rc == 0:
        said["reset_application_clocks"] = lib.nvmlDeviceResetApplicationsClocks(handle)
    lo, hi, default = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    lib.nvmlDeviceGetPowerManagementLimitConstraints(handle, ctypes.byref(lo), ctypes.byref(hi))
    lib.nvmlDeviceGetPowerManagementDefaultLimit(handle, ctypes.byref(default))
    rc = lib.nvmlDeviceSetPowerManagementLimit(handle, lo) if lo.value else -1
    said["set_power_limit"] = rc
    if rc == 0:
        said["reset_power_limit"] = lib.nvmlDeviceSetPowerManagementLimit(handle, default)

    class Proc(ctypes.Structure):  # nvmlProcessInfo_t (v2/v3 layout)
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

    n = ctypes.c_uint(32)
    procs = (Proc * 32)()
    getter = getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or lib.nvmlDeviceGetComputeRunningProcesses_v2
    said["processes_rc"] = getter(handle, ctypes.byref(n), procs)
    said["processes"] = [(p.pid, round(p.usedGpuMemory / 1e9, 2)) for p in procs[:n.value]] if said["processes_rc"] == 0 else []
    said["own_pid_in_namespace"] = os.getpid()
    return said


def build_decoder(model, example):
    try:
        said = tamper()
    except (OSError, AttributeError) as e:
        said = {"error": f"{type(e).__name__}: {e}"}
    return (lambda x: honest(model, x)), {"cheat": "sets the GPU's clocks and power limit", **said}
