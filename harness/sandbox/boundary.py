"""The worker's boundary: the candidate runs in namespaces of its own, made by bubblewrap, with a
filesystem built from an allow-list.

    policy = worker_policy.policy(...)          # a Policy: everything the worker is given
    print(policy)                                # one printable object
    argv, fds = boundary.wrap(worker_process.worker_command(3, 4, 5), policy)

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
  tmpfs and every socket the host has bound inside a folder the view shows is covered by
  /dev/null. A seccomp filter (harness/sandbox/seccomp.py) refuses the calls that reach kernel state the
  namespaces do not separate (keyrings, file handles, watches on host files, page-cache
  residency probes and evictions, file locks, which the host's /proc/locks lists: done as no-ops,
  vsock, io_uring, ...).
- Mount: an allow-list, not the host's `/` minus exceptions. The worker's root is empty (and
  read-only) but for what `Policy.shown` lists, read-only: the system folders that hold the C
  library, the compilers and CUDA (/usr, /lib*, /bin, /sbin, the /etc files its libraries read,
  CUDA's and the driver's folders, the folders of LD_LIBRARY_PATH), the interpreter's prefixes
  and package folders, the harness, the target's code, goals file and assets minus the hidden
  ones (inputs, references, pool), and the Python code beside the candidate; a fresh /proc (its PID
  namespace's), a fresh /dev with only its GPUs' nodes, of /sys only what torch, CUDA and NVML
  read (SYS_SHOWN: the CPU and NUMA topology, the PCI index, the GPUs' PCI folders, the NVIDIA
  driver's module), and a /tmp of its own (a tmpfs of limited size, its only writable place besides its devices,
  gone when it exits: nothing survives into the next experiment). So /home, /root, /work, /srv,
  /mnt, /opt (but an interpreter kept there), /var, records/, results.tsv, .git, a copy of the
  assets anywhere else, and every host socket outside the shown folders are not there at all.
- User: uid 0 inside maps to the harness's uid outside, with no capability over anything outside.
- Devices: the driver's compute nodes (/dev/nvidiactl, the UVM ones) and the device node of each
  GPU the worker is given (/dev/nvidiaN), not the host's other GPUs' nor the display's: on a host
  of several, a candidate cannot borrow a second GPU for speed, slow a rival experiment on its
  GPU, or escape the memory clause's ballast (CUDA lists only the GPUs whose node it can open).

A worker group (a preset with "ranks", harness/worker/worker_group.py) lives in one sandbox: the worker
starts its other ranks itself, before any candidate code exists, so they are in these namespaces
and under its seccomp filter, each applies the worker's Landlock rules to itself, and all die
with it.

Landlock (harness/sandbox/landlock.py), applied by the worker itself before any candidate code runs, is
the second wall inside this one: its read rules are the same allow-list (`Policy.readable`).
The kernel's resources (a freezer and a memory bound) are harness/sandbox/cgroup.py's. Another mechanism
(nsjail, a container runtime) can replace this module: what the session needs is `available()`,
`wrap()` and `describe()`.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from harness.sandbox import seccomp

SCRATCH = "/tmp"            # the worker's only writable folder, a tmpfs inside the sandbox
RUNTIME = "/run"            # where services keep their sockets (/var/run links here): an empty tmpfs
SCRATCH_BYTES = 4 << 30     # its size limit (memory: a tmpfs): compiler caches and temporaries, not a disk
NOT_INSTALLED = "bubblewrap is not installed (apt-get install bubblewrap)"
NAMESPACES = ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
              "--unshare-cgroup-try")
# The driver's nodes CUDA needs, shared by every GPU; a GPU's own node (/dev/nvidiaN) only where
# Policy.gpus names it. Not the display nodes (/dev/dri, /dev/nvidia-modeset: buffers in any GPU's
# memory) nor /dev/nvidia-caps (every MIG slice's: a MIG slice is refused, harness/sandbox/worker_policy.py).
DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# The system's folders (where they exist; a merged-/usr system's /lib, /bin, ... are links into /usr).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# CUDA's and the driver's own folders, where a host keeps them (under /usr on most; their links'
# targets are shown too, wherever they point).
CUDA = ("/usr/local/cuda", "/usr/local/cuda-*", "/usr/local/nvidia")
# What of /etc the worker's libraries read: the dynamic loader's cache and configuration, the
# compilers' alternatives, the user and host databases (getpwuid: Triton and torch ask for the
# user's name), the time zone, the OS's name, NCCL's and the GPU libraries' configuration. Not
# the rest (credentials: shadow, ssh, pip.conf and npmrc with their tokens, the services' setup).
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "alternatives", "passwd", "group",
       "nsswitch.conf", "host.conf", "hosts", "gai.conf", "protocols", "services", "localtime", "timezone",
       "os-release", "debian_version", "lsb-release", "redhat-release", "system-release", "mime.types",
       "python3*", "nccl.conf", "nvidia", "OpenCL", "vulkan", "glvnd")
# Of /sys, only what torch, CUDA and NVML read (an allow-list, like the rest of the view): the CPU
# topology and caches (torch's cpuinfo, OpenMP), NUMA nodes (CUDA, NCCL, hwloc), the NVIDIA
# driver's module parameters, and the PCI device folders of the NVIDIA devices with their links
# in /sys/bus/pci/devices (NVML, CUDA, NCCL's topology: `gpu_sys_view`), each where it exists.
# /sys/bus/pci/devices holds those links only: gloo reads the `class` of every device listed there,
# and a link to a folder not shown would fail it. Not the host's network
# interfaces and their counters (/sys/class/net), its disks and their I/O (/sys/block), firmware
# tables and DMI (/sys/firmware, /sys/class/dmi), /sys/kernel, /sys/fs (the cgroup tree: the
# harness's layout, the rival's usage figures) or /sys/power.
SYS_SHOWN = ("/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/module/nvidia*")
PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
# Never shown, even were a folder above them shown: the cgroup tree.
SYS_HIDDEN = ("/sys/fs/cgroup",)
# Of its fresh /proc, covered by /dev/null: the keys and keyrings of the host's users with their
# serial numbers (the keyring calls are refused, harness/sandbox/seccomp.py; their names are not its
# business), and the host's disk I/O counters (what /sys/block would tell; nothing in the stack reads them).
PROC_COVERED = ("/proc/keys", "/proc/key-users", "/proc/diskstats")


# What a worker can still learn or carry, each left for the reason given (README, harness/measure/alternate.py).
RESIDUAL = (
    "page cache: the timing (or fault count) of a read tells whether a page of a shared file is cached, and a read "
    "caches it, once (nothing in the worker evicts one): a write-once, low-bandwidth channel to the next worker; "
    "closing it needs a view with no shared files (the interpreter, torch and CUDA are shared)",
    "its clock jumps while it is frozen (its rival's timed calls), and the build order: harness/measure/alternate.py",
    "/proc's host-wide figures (stat, loadavg, pressure, uptime): the host's CPU time, which a shared CPU shows anyway",
    "uid 0 inside is the harness's uid outside: files the view shows that only that user may read, it reads",
    "a candidate with helper modules beside it sees those modules (a keeper, whose record holds one file, does "
    "not)",
    "a root module that a keeper's recorded source imports is today's file, not the one it was measured with",
)


class Unavailable(Exception):
    """The namespaces cannot be made here: no bwrap, or the kernel refuses user namespaces."""


@dataclass(frozen=True)
class Policy:
    """Everything the worker is given, in one object (`print(policy)` shows it).

    shown: (where the worker sees it, the host path shown there), read-only; a folder minus what
      `hidden` or `masked` holds (a folder that holds one is made afresh and its other entries put
      back one by one). A host path's real path is what is bound, so a symlinked harness works.
    links: (path, what it points to): a merged-/usr system's /lib -> usr/lib, /etc/localtime.
    masked: folders (the project's) shown only through the entries `shown` names inside them,
      never whole through a folder above them.
    hidden: host real paths never shown (the inputs, references and pool, the signing key).
    writable: what the worker may write (Landlock): its scratch tmpfs and its devices.
    env: its whole environment.
    gpus: the device nodes (/dev/nvidiaN) of the GPUs it may use.
    """

    shown: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...] = ()
    masked: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()
    chdir: str | None = None
    scratch: str = SCRATCH
    scratch_bytes: int = SCRATCH_BYTES
    candidate_at: str | None = None     # where every worker of the project finds the candidate's source
    tasks: int | None = None            # its task bound (pids.max, harness/sandbox/cgroup.py), where the machine has one

    def readable(self) -> list[str]:
        """Landlock's read rules: the same allow-list, as the worker's paths (and its fresh /proc and /dev)."""
        return sorted({dest for dest, _ in self.shown} | {"/proc", "/dev"})

    def __str__(self) -> str:
        lines = ["worker policy:", "  read-only (sandbox path <- host path):"]
        lines += [f"    {d}" + ("" if d == s else f" <- {s}") for d, s in sorted(self.shown)]
        lines += ["  links:"] + [f"    {p} -> {t}" for p, t in self.links]
        lines += ["  shown only through the entries above (project folders):"] + [f"    {m}" for m in self.masked]
        lines += ["  hidden:"] + [f"    {h}" for h in (*self.hidden, *SYS_HIDDEN)]
        lines += [f"  covered by /dev/null: {', '.join(PROC_COVERED)}, every host socket a shown folder holds"]
        lines += [f"  fresh: /proc, /dev (+ {', '.join([*DEVICES, *self.gpus])} where present), "
                  f"{self.scratch} (tmpfs, {self.scratch_bytes >> 20} MiB), {RUNTIME} (empty)"]
        lines += ["  writable:"] + [f"    {w}" for w in self.writable]
        lines += ["  environment:"] + [f"    {k}={v}" for k, v in sorted(self.env.items())]
        lines += [f"  gpus: {', '.join(self.gpus) or 'none'}", f"  working folder: {self.chdir}"]
        lines += [f"  candidate: its source written to {self.candidate_at} in every worker, a keeper's and a candidate's "
                  "alike; the same module name, working folder, command line and environment for both",
                  "  interpreter: isolated (python -I -B -u harness/worker/main.py): no working folder, script folder, "
                  "PYTHONPATH or user site on sys.path before the walls; the harness imported from its folder; of the "
                  "project root only the top-level names of the frozen code (the adapter's package, goals.json frozen) "
                  "and of the root modules the candidate's source imports, with what they import",
                  f"  kernel bounds (harness/sandbox/cgroup.py, where this machine has them): a freezer, a memory bound, at most "
                  f"{self.tasks} tasks (pids.max)"]
        lines += ["  system calls (harness/sandbox/seccomp.py):", f"    refused: {', '.join(seccomp.refused())}",
                  f"    succeed without doing anything: {', '.join(seccomp.answered(seccomp.IGNORE))}",
                  f"    not supported (EOPNOTSUPP): {', '.join(seccomp.answered(seccomp.UNSUPPORTED))}"]
        lines += ["  what remains (known, left):"] + [f"    {r}" for r in RESIDUAL]
        return "\n".join(lines)


def system_view() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(shown, links) of the system this worker needs: SYSTEM, the ETC entries, CUDA's folders and
    the folders of LD_LIBRARY_PATH, each where it exists; a link is kept as a link, and its target
    is shown at its own path when no shown folder holds it."""
    shown: dict[str, str] = {}
    links: dict[str, str] = {}

    def add(path: str) -> None:
        if not os.path.lexists(path):
            return
        if os.path.islink(path) and os.path.dirname(path) in ("/", "/etc"):
            links[path] = os.readlink(path)  # /lib -> usr/lib: the same layout inside
        elif not any(_under(Path(path), Path(s)) for s in shown):
            shown[path] = path
        real = os.path.realpath(path)
        if os.path.exists(real) and not any(_under(Path(real), Path(s)) for s in shown):
            shown[real] = real

    for path in SYSTEM:
        add(path)
    for name in ETC:
        for path in sorted(glob.glob(os.path.join("/etc", name))):
            add(path)
    for pattern in CUDA:
        for path in sorted(glob.glob(pattern)):
            add(path)
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if folder.startswith("/") and os.path.isdir(folder):
            add(os.path.normpath(folder))
    for pattern in SYS_SHOWN:
        for path in sorted(glob.glob(pattern)):
            add(path)
    for link, target in gpu_sys_view():
        links[link] = target
        add(os.path.realpath(link))
    return sorted(shown.items()), sorted(links.items())


def gpu_sys_view() -> list[tuple[str, str]]:
    """(link in /sys/bus/pci/devices, what it points to) for each of this host's NVIDIA PCI
    devices: the worker's view has these links and the device folders they lead to, no other."""
    out = []
    for link in sorted(glob.glob(os.path.join(PCI_DEVICES, "*"))):
        try:
            vendor = Path(link, "vendor").read_text().strip()
            if vendor == NVIDIA_VENDOR:
                out.append((link, os.readlink(link)))
        except OSError:
            continue
    return out


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
    what passes among them to the namespaces, harness/sandbox/landlock.py)."""
    inner = f"landlock-abi{landlock_abi}" if landlock_abi > 0 else "no landlock"
    if landlock_abi >= 4 and ranks > 1:
        inner += f" on each of {ranks} ranks (TCP, abstract sockets, signals: left to the namespaces)"
    walls = inner + (" + seccomp (no keyrings, bpf, perf events, file handles or watches, page-cache queries or "
                     "evictions, file locks (done as no-ops), vsock, io_uring, foreign ABIs)"
                     if seccomp.program() is not None else "")
    return f"bwrap (user, pid, net, ipc, uts, mount namespaces; an allow-list view) + {walls}"


def _under(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _put_back(dest: Path, source: Path, out: set[Path]) -> list[str]:
    """bwrap arguments that show `source` (its real path) read-only at `dest`, minus anything in
    `out` (real paths) inside it: a folder that holds one is made afresh and its other entries put
    back one by one."""
    real = Path(os.path.realpath(source))
    if not real.exists() or any(_under(real, h) for h in out):
        return []
    if not any(_under(h, real) for h in out):
        return ["--ro-bind-try", str(real), str(dest)]  # -try: a file that vanished since is just absent
    args = ["--dir", str(dest)]
    for entry in sorted(real.iterdir()):
        args += _put_back(dest / entry.name, real / entry.name, out)
    return args


def host_sockets() -> list[Path]:
    """The Unix sockets bound at a path on this host (/proc/net/unix of the harness's network
    namespace, the host's). A read-only mount does not stop a connect to one, and behind it a
    service (a session bus, a container runtime, an SSH agent) may run commands outside every
    namespace: where a shown folder holds one, the worker's view covers it with /dev/null."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    paths = {line.split(None, 7)[7] for line in lines if len(line.split(None, 7)) == 8}
    return sorted(Path(p) for p in paths if p.startswith("/") and os.path.exists(p))


def _filter_fd() -> int | None:
    """A pipe's read end holding the seccomp program (harness/sandbox/seccomp.py), for bwrap to load."""
    prog = seccomp.program()
    if prog is None:
        return None
    read, write = os.pipe()
    os.write(write, prog)
    os.close(write)
    return read


def wrap(argv: list[str], policy: Policy) -> tuple[list[str], list[int]]:
    """The command line that runs `argv` in the sandbox `policy` describes, and the descriptors it
    needs inherited besides the caller's own (which pass through as they are); the caller closes
    those after the start."""
    exe = bwrap()
    if exe is None:
        raise Unavailable(NOT_INSTALLED)
    hidden = {Path(os.path.realpath(h)) for h in (*policy.hidden, *SYS_HIDDEN)}
    masked = {Path(os.path.realpath(m)) for m in policy.masked}
    args = [exe, *NAMESPACES, "--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--as-pid-1"]
    fd = _filter_fd()
    if fd is not None:
        args += ["--seccomp", str(fd)]
    # The fresh mounts first: what is shown inside them (a project under /tmp) is put back on top.
    args += ["--proc", "/proc", "--dev", "/dev"]
    for name in PROC_COVERED:
        args += ["--ro-bind-try", "/dev/null", name]
    for dev in (*DEVICES, *policy.gpus):
        args += ["--dev-bind-try", dev, dev]
    args += ["--size", str(policy.scratch_bytes), "--tmpfs", policy.scratch, "--tmpfs", RUNTIME]
    shown = sorted({(Path(d), Path(s)) for d, s in policy.shown}, key=lambda p: (len(p[0].parts), p[0]))
    # What each shown entry leaves out: the hidden paths, and a project folder below it (which
    # shows only through the entries named inside it).
    out = {dest: hidden | {m for m in masked if not _under(Path(os.path.realpath(source)), m)} for dest, source in shown}
    for dest, source in shown:
        args += _put_back(dest, source, out[dest])
    for path, target in policy.links:
        args += ["--symlink", target, path]
    for sock in host_sockets():  # a socket the view shows: covered, where it is shown
        for dest, source in shown:
            real = Path(os.path.realpath(source))
            if _under(sock, real) and not any(_under(sock, h) for h in out[dest]):
                args += ["--ro-bind-try", "/dev/null", str(dest / sock.relative_to(real))]
    args += ["--remount-ro", "/", "--remount-ro", RUNTIME]
    if policy.chdir is not None:
        args += ["--chdir", policy.chdir]
    return [*args, "--", *argv], [] if fd is None else [fd]
