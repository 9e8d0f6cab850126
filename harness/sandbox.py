"""The worker's boundary: the candidate runs in namespaces of its own, made by bubblewrap.

    argv, fds = sandbox.wrap(["python", "-m", "harness.worker", "3", "4", "5"], view)  # Popen(argv, pass_fds=[3, 4, 5, *fds])

bubblewrap (`bwrap`, a Debian/Ubuntu/Fedora package, the tool Flatpak and Claude Code's own
sandbox use) starts the worker in new user, PID, network, IPC, UTS and mount namespaces, with
every capability dropped, no new user namespaces inside, a session of its own and a death tied to
the harness's. What follows for the candidate:

- PID: it sees only its own processes, and is PID 1 itself (no bwrap process inside, whose
  command line would show how it was started). The harness has no PID there (getppid() is 0), so
  no signal, ptrace, scheduler, priority, affinity or rlimit call can reach it; when the worker
  exits the kernel kills every process in the namespace, however many it forked.
- Network: a loopback of its own and nothing else; no TCP, UDP or abstract socket reaches the host.
  A Unix socket at a path would (a read-only mount does not stop a connect), so /run is an empty
  tmpfs and every socket the host has bound elsewhere is covered by /dev/null. A seccomp filter
  (harness/seccomp.py) refuses io_uring and foreign system-call ABIs.
- Mount: the filesystem read-only; the project folders (the repository and the target's folder)
  replaced by empty ones into which only what the worker needs is put back, read-only: the
  harness package, the target's adapter package, the goals file, the target's assets minus the
  hidden ones (inputs, references, pool) and the candidate's own folder. So records/, runs/,
  results.tsv, .git, profiles and the locks are not there at all. /tmp is a fresh tmpfs of
  limited size (and /dev a fresh one of bwrap's), its only writable places, gone when it exits:
  nothing survives into the next experiment.
- User: uid 0 inside maps to the harness's uid outside, with no capability over anything outside.
- Devices: the driver's compute nodes (/dev/nvidiactl, the UVM ones) and the device node of each
  GPU the worker is given (/dev/nvidiaN), not the host's other GPUs' nor the display's: on a host of several, a
  candidate cannot borrow a second GPU for speed, slow a rival experiment on its GPU, or escape
  the memory clause's ballast (CUDA lists only the GPUs whose node it can open).

A worker group (a preset with "ranks", harness/worker_group.py) lives in one sandbox: the worker
starts its other ranks itself, before any candidate code exists, so they are in these namespaces
and under its seccomp filter, each applies the worker's Landlock rules to itself, and all die
with it.

Landlock (harness/landlock.py), applied by the worker itself before any candidate code runs, is
the second wall inside this one. Another mechanism (nsjail, a container runtime) can replace this
module: what the session needs is `available()`, `wrap()` and `describe()`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness import seccomp

SCRATCH = "/tmp"            # the worker's only writable folder, a tmpfs inside the sandbox
RUNTIME = "/run"            # where services keep their sockets (/var/run links here): an empty tmpfs
SCRATCH_BYTES = 4 << 30     # its size limit (memory: a tmpfs): compiler caches and temporaries, not a disk
NOT_INSTALLED = "bubblewrap is not installed (apt-get install bubblewrap)"
NAMESPACES = ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
              "--unshare-cgroup-try")
# The driver's nodes CUDA needs, shared by every GPU; a GPU's own node (/dev/nvidiaN) only where
# View.gpus names it. Not the display nodes (/dev/dri, /dev/nvidia-modeset: buffers in any GPU's
# memory) nor /dev/nvidia-caps (every MIG slice's: a MIG slice is refused, harness/worker_process.py).
DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


class Unavailable(Exception):
    """The namespaces cannot be made here: no bwrap, or the kernel refuses user namespaces."""


@dataclass
class View:
    """What the worker's filesystem shows. `masked` folders (the project's) start empty and read-only;
    of what was in them (or in the scratch tmpfs), only the `visible` paths come back, read-only,
    each at the path it was given (its real path is what is bound, so a symlinked harness works);
    `hidden` paths (real paths) stay out, also inside a visible folder or anywhere else on the host.
    Of the GPUs, only those whose nodes `gpus` names are there. Everything else is the host's, read-only."""

    masked: list[Path]
    visible: list[Path]
    hidden: list[Path] = field(default_factory=list)
    chdir: Path | None = None
    gpus: list[str] = field(default_factory=list)  # the device nodes (/dev/nvidiaN) of the GPUs it may use


def bwrap() -> str | None:
    return shutil.which("bwrap")


def available() -> str | None:
    """None when the sandbox can be made here, else why not (one line)."""
    exe = bwrap()
    if exe is None:
        return NOT_INSTALLED
    probe = subprocess.run([exe, *NAMESPACES, "--disable-userns", "--cap-drop", "ALL", "--die-with-parent",
                            "--as-pid-1", "--ro-bind", "/", "/", "--size", "1048576", "--tmpfs", SCRATCH, "--", "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["exit code %d" % probe.returncode])[-1]
        return f"bubblewrap cannot make the worker's namespaces here ({why[:200]})"
    return None


def describe(landlock_abi: int, ranks: int = 1) -> str:
    """What a row records about the sandbox its worker ran in (a group of `ranks`: Landlock leaves
    what passes among them to the namespaces, harness/landlock.py)."""
    inner = f"landlock-abi{landlock_abi}" if landlock_abi > 0 else "no landlock"
    if landlock_abi >= 4 and ranks > 1:
        inner += f" on each of {ranks} ranks (TCP, abstract sockets, signals: left to the namespaces)"
    walls = f"{inner}" + (" + seccomp (no io_uring, no foreign ABIs)" if seccomp.program() is not None else "")
    return f"bwrap (user, pid, net, ipc, uts, mount namespaces) + {walls}"


def _under(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _put_back(dest: Path, hidden: set[Path]) -> list[str]:
    """bwrap arguments that bind `dest` (its real path) read-only, minus anything hidden inside it:
    a folder that holds a hidden path is made afresh and its other entries put back one by one."""
    real = Path(os.path.realpath(dest))
    if not real.exists() or any(_under(real, h) for h in hidden):
        return []
    if not any(_under(h, real) for h in hidden):
        return ["--ro-bind-try", str(real), str(dest)]  # -try: a file that vanished since is just absent
    args = ["--dir", str(dest)]
    for entry in sorted(real.iterdir()):
        args += _put_back(dest / entry.name, hidden)
    return args


def host_sockets() -> list[Path]:
    """The Unix sockets bound at a path on this host (/proc/net/unix of the harness's network
    namespace, the host's). A read-only mount does not stop a connect to one, and behind it a
    service (a session bus, a container runtime, an SSH agent) may run commands outside every
    namespace: the worker's view covers each with /dev/null."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    paths = {line.split(None, 7)[7] for line in lines if len(line.split(None, 7)) == 8}
    return sorted(Path(p) for p in paths if p.startswith("/") and os.path.exists(p))


def _filter_fd() -> int | None:
    """A pipe's read end holding the seccomp program (harness/seccomp.py), for bwrap to load."""
    prog = seccomp.program()
    if prog is None:
        return None
    read, write = os.pipe()
    os.write(write, prog)
    os.close(write)
    return read


def wrap(argv: list[str], view: View) -> tuple[list[str], list[int]]:
    """The command line that runs `argv` in the sandbox, and the descriptors it needs inherited
    besides the caller's own (which pass through as they are); the caller closes those after the start."""
    exe = bwrap()
    if exe is None:
        raise Unavailable(NOT_INSTALLED)
    hidden = {Path(os.path.realpath(h)) for h in view.hidden}
    args = [exe, *NAMESPACES, "--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--as-pid-1",
            "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    fd = _filter_fd()
    if fd is not None:
        args += ["--seccomp", str(fd)]
    for dev in (*DEVICES, *view.gpus):
        args += ["--dev-bind-try", dev, dev]
    args += ["--size", str(SCRATCH_BYTES), "--tmpfs", SCRATCH, "--tmpfs", RUNTIME]
    masked = sorted({Path(os.path.abspath(m)) for m in view.masked}, key=lambda p: len(p.parts))
    for top in masked:
        args += ["--tmpfs", str(top)]
    empty = [*masked, Path(SCRATCH), Path(RUNTIME)]
    for dest in sorted({Path(os.path.abspath(v)) for v in view.visible}, key=lambda p: len(p.parts)):
        if any(_under(dest, top) for top in empty) and dest not in empty:
            args += _put_back(dest, hidden)
    covered = []
    for h in sorted(hidden):  # a hidden path elsewhere on the host: covered by an empty one
        if h.exists() and not any(_under(h, top) for top in empty):
            args += ["--tmpfs", str(h)] if h.is_dir() else ["--ro-bind", "/dev/null", str(h)]
            covered += [h] if h.is_dir() else []
    for sock in host_sockets():
        if not any(_under(sock, top) for top in empty):
            args += ["--ro-bind-try", "/dev/null", str(sock)]
    for top in [*masked, *covered, Path(RUNTIME)]:
        args += ["--remount-ro", str(top)]
    if view.chdir is not None:
        args += ["--chdir", str(view.chdir)]
    return [*args, "--", *argv], [] if fd is None else [fd]
