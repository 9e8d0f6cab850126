"""Cheater: shrinks the shared output buffer under the harness. It finds the output buffer's
descriptor (the Worker object's configuration, else the last "memfd:auto-optim-buffer" among
/proc/self/fd) and ftruncate()s it to 0 bytes at the end of build, so that the harness's next
touch of its mapping (poisoning the output before a call, copying it after) dies of SIGBUS: no
row, no reason, a dead tool (with CHEAT_TRUNCATE=input it shrinks the input buffer instead).
If the truncation is refused it returns an output of the wrong shape, a plain gate failure.

Stopped by: buffers the worker cannot resize (a memfd sealed with F_SEAL_SHRINK | F_SEAL_GROW
before the worker gets it, or a device buffer), or a harness that survives the fault and reports
it. The test checks that the harness survives and reports a failure with a one-line reason."""

import os

from _reach import worker
from _target import honest


def find_fd(which: str) -> int | None:
    w = worker()
    spec = w.cfg.get(which) if w is not None else None
    if isinstance(spec, dict) and isinstance(spec.get("fd"), int):
        return spec["fd"]
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if "auto-optim-buffer" in os.readlink(f"/proc/self/fd/{name}"):
                fds.append(int(name))
        except OSError:
            pass
    fds.sort()
    return (fds[-1] if which == "output" else fds[0]) if fds else None


def build_decoder(model, example):
    which = os.environ.get("CHEAT_TRUNCATE", "output")
    fd = find_fd(which)
    try:
        if fd is None:
            raise OSError("no buffer descriptor found")
        os.ftruncate(fd, 0)
        truncated = True
        note = f"{which} buffer (fd {fd}) truncated to 0 bytes"
    except OSError as e:
        truncated, note = False, f"refused: {e}"

    def forward(x):
        out = honest(model, x)
        return out if truncated else out[..., :1]  # refused: a plain gate failure

    return forward, {"cheat": "truncates the shared buffer", "note": note}
