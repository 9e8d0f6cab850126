"""A seccomp filter for the worker: the system calls that reach kernel state the namespaces do not
separate (it outlives the worker, or crosses to the host) are refused with EPERM.

bubblewrap loads the program (`--seccomp FD`) for the whole sandbox: the worker, a worker group's
other ranks (harness/worker/worker_group.py) and everything they start inherit it, and it cannot be
lifted. Classic BPF over struct seccomp_data, built here as bytes. Returns None on an
architecture it does not know; the sandbox then runs without it (the row says so).

What is refused, and why the worker (torch, Triton's compiler: gcc and ptxas, CUDA, NCCL) does
not need it. `REFUSED` is the list; each entry names its family:

- keyrings (add_key, request_key, keyctl): the kernel's keyrings are not namespaced by bwrap.
  The host user's keyring (`_uid.N`) is found by its serial number in /proc/keys and written from
  inside the user namespace; a session keyring the harness runs in is inherited. Either carries
  a cache from one experiment to the next, or hands what the worker is given (the hidden inputs)
  to any host process of the same user. request_key also starts /sbin/request-key on the host.
  None of torch, CUDA, NCCL or a compiler uses keyrings (they are for credentials: Kerberos,
  NFS, fscrypt).
- bpf: maps and programs outlive a process when pinned or held by another; a BPF program sees the
  host. Nothing in the stack loads BPF.
- perf_event_open: hardware and software counters of the whole CPU or of other processes (a
  timing side channel on the harness and the rival worker). The harness's profiler
  (torch.profiler: RecordFunction on the CPU, CUPTI on the GPU) does not use perf events.
- userfaultfd: stalls the kernel's own accesses to a memory range, the usual way to widen a kernel
  race; nothing in the stack uses it.
- fanotify_init, inotify_init, inotify_init1, fcntl(F_NOTIFY): watches on files and folders of the
  host that the worker's view shows read-only; their events say when another process (the rival
  worker, the harness starting a tool) opens or reads them. torch's bundled libuv can make an
  inotify watch (uv_fs_event_start) but nothing in torch starts one; no other part watches files.
- fcntl(F_SETLEASE): a lease on a host file delays any host process that opens it for writing.
- kcmp, process_vm_readv, process_vm_writev: another process's memory and descriptors (within the
  sandbox's PID namespace only, but no part of the stack needs them: NCCL moves data through the
  GPU and /dev/shm, gloo through sockets).
- name_to_handle_at, open_by_handle_at: a file handle opens a file by inode number, around the
  mount view (the view's allow-list would mean nothing); nothing in the stack uses them.
- mincore, cachestat: which pages of a file are in the page cache: a host file's residency is a
  channel from one experiment to the next. (glibc does not call mincore; libunwind does, to probe
  an address, and treats any error but ENOMEM as "mapped".)
- syslog: the host's kernel log (other processes' OOM reports and faults), which a host process
  can write to.
- socket(AF_VSOCK): a virtual machine's sockets to its host are not in any network namespace (the
  GPU machines are Firecracker VMs); NCCL and gloo use TCP and Unix sockets only.
- io_uring_setup: a ring performs file and socket operations without the system calls this filter
  and an audit see.
- page-cache probes and evictions (residency as a channel from one experiment to the next, or to
  a host process): preadv2 and pwritev2 with RWF_NOWAIT (EAGAIN says "not cached") answer
  EOPNOTSUPP, the documented answer of a file that does not support it (a caller then reads
  without the flag); fadvise64 and readahead, and madvise's MADV_COLD and MADV_PAGEOUT, succeed
  without doing anything: each is advice the kernel may ignore anyway, so every caller already
  copes, and none can evict or pin a page for the next worker to find (MADV_DONTNEED and
  MADV_FREE, which allocators use, are left alone). process_madvise is refused.
  What remains, and why it is left: a page can still be probed by timing a read (or counting its
  faults) and set by reading it, once (nothing in the worker can evict one): a write-once,
  low-bandwidth channel in pages of the read-only view that the worker itself brought in, which
  only a view without shared files would close (the interpreter, torch and CUDA are shared files).
- file locks: flock and fcntl's F_SETLK, F_SETLKW, F_OFD_SETLK and F_OFD_SETLKW succeed without
  doing anything (SECCOMP_RET_ERRNO with errno 0 skips the call and returns 0), and F_GETLK and
  F_OFD_GETLK are refused. A lock of the worker's is listed, range and all, in the host's
  /proc/locks (whatever the namespaces), and F_GETLK names another process's lock on a file
  both see (the rival worker's): both carry data. Inside one worker locks only guard caches in
  its private /tmp, whose writers (torch's inductor, Triton) publish by atomic rename; the
  ranks of a worker group share that /tmp and lose mutual exclusion there, which the renames
  make safe.
- every system call of another ABI (the 32-bit and x32 ABIs of an x86-64 kernel have numbers of
  their own, which a list of numbers would miss).

(socket(AF_UNIX) cannot be refused: the CUDA driver itself makes Unix sockets; seen on an H100,
error 304 at cuInit. Unix sockets at host paths are kept out by the mount view, harness/sandbox/boundary.py.)
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
# struct seccomp_data: nr at 0, arch at 4, then six 64-bit arguments from 16 (little-endian
# machines: an argument's low 32 bits first, which is all the kernel reads of an int argument).
_NR, _ARCH, _ARGS = 0, 4, 16
AF_VSOCK = 40
F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 5, 6, 7, 36, 37, 38
F_SETLEASE, F_NOTIFY = 1024, 1026
RWF_NOWAIT = 8
MADV_COLD, MADV_PAGEOUT = 20, 21

# What a matched call gets: refused (EPERM), done as if it succeeded without doing anything (0:
# SECCOMP_RET_ERRNO with errno 0 skips the call), or "not supported" (EOPNOTSUPP).
REFUSE, IGNORE, UNSUPPORTED = errno.EPERM, 0, errno.EOPNOTSUPP


@dataclass(frozen=True)
class Arch:
    audit: int                      # AUDIT_ARCH_*: what seccomp_data.arch reads on this machine
    numbers: dict[str, int]         # system call numbers by name (asm/unistd.h)


@dataclass(frozen=True)
class ArgRule:
    """A call matched for one value of one argument: equal to it, or (bits) holding any of its bits."""

    call: str
    arg: int
    value: int
    label: str
    answer: int = REFUSE
    bits: bool = False

    @property
    def name(self) -> str:
        return f"{self.call}({self.label})"


# The refused calls by name, each with its family (for the report and the tests).
REFUSED = {
    "add_key": "keyrings", "request_key": "keyrings", "keyctl": "keyrings",
    "bpf": "bpf", "perf_event_open": "perf events", "userfaultfd": "userfaultfd",
    "fanotify_init": "file watches", "inotify_init": "file watches", "inotify_init1": "file watches",
    "kcmp": "other processes", "process_vm_readv": "other processes", "process_vm_writev": "other processes",
    "name_to_handle_at": "file handles", "open_by_handle_at": "file handles",
    "mincore": "page cache", "cachestat": "page cache", "process_madvise": "page cache",
    "syslog": "kernel log", "io_uring_setup": "io_uring",
}
# Calls that succeed without doing anything, whatever their arguments.
IGNORED = {"flock": "file locks", "fadvise64": "page cache", "readahead": "page cache"}
# Calls matched for some values of one argument (their other values are allowed).
WITH_ARGS = (
    ArgRule("socket", 0, AF_VSOCK, "AF_VSOCK"),
    ArgRule("fcntl", 1, F_SETLEASE, "F_SETLEASE"), ArgRule("fcntl", 1, F_NOTIFY, "F_NOTIFY"),
    ArgRule("fcntl", 1, F_GETLK, "F_GETLK"), ArgRule("fcntl", 1, F_OFD_GETLK, "F_OFD_GETLK"),
    *(ArgRule("fcntl", 1, v, n, IGNORE) for v, n in ((F_SETLK, "F_SETLK"), (F_SETLKW, "F_SETLKW"),
                                                     (F_OFD_SETLK, "F_OFD_SETLK"), (F_OFD_SETLKW, "F_OFD_SETLKW"))),
    ArgRule("madvise", 2, MADV_COLD, "MADV_COLD", IGNORE), ArgRule("madvise", 2, MADV_PAGEOUT, "MADV_PAGEOUT", IGNORE),
    ArgRule("preadv2", 5, RWF_NOWAIT, "RWF_NOWAIT", UNSUPPORTED, bits=True),
    ArgRule("pwritev2", 5, RWF_NOWAIT, "RWF_NOWAIT", UNSUPPORTED, bits=True),
)
# Kept for callers that list the refusals with an argument: (call, argument index, value, its name).
REFUSED_WITH = tuple((r.call, r.arg, r.value, r.label) for r in WITH_ARGS if r.answer == REFUSE)

_X86_64 = Arch(0xC000003E, {
    "add_key": 248, "request_key": 249, "keyctl": 250, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "fanotify_init": 300, "inotify_init": 253, "inotify_init1": 294, "kcmp": 312, "process_vm_readv": 310,
    "process_vm_writev": 311, "name_to_handle_at": 303, "open_by_handle_at": 304, "mincore": 27, "cachestat": 451,
    "process_madvise": 440, "syslog": 103, "io_uring_setup": 425, "socket": 41, "fcntl": 72, "flock": 73,
    "fadvise64": 221, "readahead": 187, "madvise": 28, "preadv2": 327, "pwritev2": 328})
_AARCH64 = Arch(0xC00000B7, {  # the generic table (asm-generic/unistd.h): no inotify_init there
    "add_key": 217, "request_key": 218, "keyctl": 219, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "fanotify_init": 262, "inotify_init1": 26, "kcmp": 272, "process_vm_readv": 270, "process_vm_writev": 271,
    "name_to_handle_at": 264, "open_by_handle_at": 265, "mincore": 232, "cachestat": 451, "process_madvise": 440,
    "syslog": 116, "io_uring_setup": 425, "socket": 198, "fcntl": 25, "flock": 32, "fadvise64": 223,
    "readahead": 213, "madvise": 233, "preadv2": 286, "pwritev2": 287})
ARCHES = {"x86_64": _X86_64, "aarch64": _AARCH64}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _ret(answer: int) -> bytes:
    return _op(_RET_K, _ERRNO | answer)


def answered(answer: int, machine: str | None = None) -> list[str]:
    """The calls this machine's filter gives `answer` (REFUSE, IGNORE or UNSUPPORTED), one short
    phrase each: a name, or call(ARGUMENT) where only that argument's value is matched."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return []
    whole = REFUSED if answer == REFUSE else IGNORED if answer == IGNORE else {}
    return [n for n in whole if n in arch.numbers] + [r.name for r in WITH_ARGS if r.answer == answer]


def refused(machine: str | None = None) -> list[str]:
    """What the filter refuses (EPERM) on this machine (the row's sandbox label, the tests)."""
    return answered(REFUSE, machine)


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture, or None where it is not known.

    Layout: check the architecture; load the call's number; refuse another ABI's numbers; then
    one block a matched call: `if nr != call: skip the block`, and in it either its answer, or
    for each matched argument value `load the argument; if it matches: answer`, then allow.
    Every jump is short and forward (classic BPF's 8-bit offsets)."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    out = [_op(_LD_W_ABS, _ARCH), _op(_JEQ_K, arch.audit, jt=1), _ret(REFUSE),
           _op(_LD_W_ABS, _NR), _op(_JGE_K, _X32_BIT, jt=0, jf=1), _ret(REFUSE)]
    for answer, names in ((REFUSE, REFUSED), (IGNORE, IGNORED)):
        for name in names:
            if name in arch.numbers:
                out += [_op(_JEQ_K, arch.numbers[name], jt=0, jf=1), _ret(answer)]
    for call in dict.fromkeys(r.call for r in WITH_ARGS):
        block: list[bytes] = []
        for r in (r for r in WITH_ARGS if r.call == call):
            block += [_op(_LD_W_ABS, _ARGS + 8 * r.arg), _op(_JSET_K if r.bits else _JEQ_K, r.value, jt=0, jf=1),
                      _ret(r.answer)]
        block.append(_op(_RET_K, _ALLOW))  # the call, with none of the matched values
        if len(block) > 255:
            raise AssertionError("a call's block outgrew classic BPF's 8-bit jumps")
        out += [_op(_JEQ_K, arch.numbers[call], jt=0, jf=len(block)), *block]
    out.append(_op(_RET_K, _ALLOW))
    return b"".join(out)
