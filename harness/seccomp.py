"""A seccomp filter for the worker: the system calls that reach kernel state the namespaces do not
separate (it outlives the worker, or crosses to the host) are refused with EPERM.

bubblewrap loads the program (`--seccomp FD`) for the whole sandbox: the worker, a worker group's
other ranks (harness/worker_group.py) and everything they start inherit it, and it cannot be
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
- every system call of another ABI (the 32-bit and x32 ABIs of an x86-64 kernel have numbers of
  their own, which a list of numbers would miss).

(socket(AF_UNIX) cannot be refused: the CUDA driver itself makes Unix sockets; seen on an H100,
error 304 at cuInit. Unix sockets at host paths are kept out by the mount view, harness/sandbox.py.)
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
# struct seccomp_data: nr at 0, arch at 4, then six 64-bit arguments from 16 (little-endian
# machines: an argument's low 32 bits first, which is all the kernel reads of an int argument).
_NR, _ARCH, _ARGS = 0, 4, 16
AF_VSOCK = 40
F_SETLEASE, F_NOTIFY = 1024, 1026


@dataclass(frozen=True)
class Arch:
    audit: int                      # AUDIT_ARCH_*: what seccomp_data.arch reads on this machine
    numbers: dict[str, int]         # system call numbers by name (asm/unistd.h)


# The refused calls by name, each with its family (for the report and the tests). fcntl and
# socket are refused for the argument values in REFUSED_WITH.
REFUSED = {
    "add_key": "keyrings", "request_key": "keyrings", "keyctl": "keyrings",
    "bpf": "bpf", "perf_event_open": "perf events", "userfaultfd": "userfaultfd",
    "fanotify_init": "file watches", "inotify_init": "file watches", "inotify_init1": "file watches",
    "kcmp": "other processes", "process_vm_readv": "other processes", "process_vm_writev": "other processes",
    "name_to_handle_at": "file handles", "open_by_handle_at": "file handles",
    "mincore": "page cache", "cachestat": "page cache", "syslog": "kernel log", "io_uring_setup": "io_uring",
}
# (call, argument index, value, its name): refused only for that value of that argument.
REFUSED_WITH = (("socket", 0, AF_VSOCK, "AF_VSOCK"), ("fcntl", 1, F_SETLEASE, "F_SETLEASE"),
                ("fcntl", 1, F_NOTIFY, "F_NOTIFY"))

_X86_64 = Arch(0xC000003E, {
    "add_key": 248, "request_key": 249, "keyctl": 250, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "fanotify_init": 300, "inotify_init": 253, "inotify_init1": 294, "kcmp": 312, "process_vm_readv": 310,
    "process_vm_writev": 311, "name_to_handle_at": 303, "open_by_handle_at": 304, "mincore": 27, "cachestat": 451,
    "syslog": 103, "io_uring_setup": 425, "socket": 41, "fcntl": 72})
_AARCH64 = Arch(0xC00000B7, {  # the generic table (asm-generic/unistd.h): no inotify_init there
    "add_key": 217, "request_key": 218, "keyctl": 219, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "fanotify_init": 262, "inotify_init1": 26, "kcmp": 272, "process_vm_readv": 270, "process_vm_writev": 271,
    "name_to_handle_at": 264, "open_by_handle_at": 265, "mincore": 232, "cachestat": 451, "syslog": 116,
    "io_uring_setup": 425, "socket": 198, "fcntl": 25})
ARCHES = {"x86_64": _X86_64, "aarch64": _AARCH64}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def refused(machine: str | None = None) -> list[str]:
    """What the filter refuses on this machine, one short phrase each (the row's sandbox label)."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return []
    return [name for name in REFUSED if name in arch.numbers] + [f"{call}({label})" for call, _, _, label in REFUSED_WITH]


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture, or None where it is not known.

    Layout: check the architecture; load the call's number; one test per refused number; for a
    call refused for some argument values, load that argument, test the values, reload the
    number; allow. Every refusal jumps forward to the one `deny` at the end (a jump's offset is
    8 bits: the program stays far below 255 instructions)."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    # (code, k, jump-if-true target or None) with targets resolved below: "deny" or fall through.
    body: list[tuple[int, int, str | None]] = [(_LD_W_ABS, _NR, None), (_JGE_K, _X32_BIT, "deny")]
    body += [(_JEQ_K, arch.numbers[name], "deny") for name in REFUSED if name in arch.numbers]
    for call in dict.fromkeys(c for c, _, _, _ in REFUSED_WITH):
        inner: list[tuple[int, int, str | None]] = []
        loaded = None
        for c, i, value, _ in REFUSED_WITH:
            if c != call:
                continue
            if i != loaded:
                inner.append((_LD_W_ABS, _ARGS + 8 * i, None))
                loaded = i
            inner.append((_JEQ_K, value, "deny"))
        inner.append((_LD_W_ABS, _NR, None))
        body.append((_JEQ_K, arch.numbers[call], f"skip{len(inner)}"))  # not this call: past its block
        body += inner
    out = [_op(_LD_W_ABS, _ARCH), _op(_JEQ_K, arch.audit, jt=1), _op(_RET_K, _ERRNO | errno.EPERM)]
    deny_at = len(body) + 1  # after the body and the allow
    for n, (code, k, target) in enumerate(body):
        if target == "deny":
            out.append(_op(code, k, jt=deny_at - n - 1))
        elif target is not None and target.startswith("skip"):  # jump when it is NOT the call
            out.append(_op(code, k, jt=0, jf=int(target[4:])))
        else:
            out.append(_op(code, k))
    out += [_op(_RET_K, _ALLOW), _op(_RET_K, _ERRNO | errno.EPERM)]
    if deny_at > 255:
        raise AssertionError("the seccomp program outgrew classic BPF's 8-bit jumps")
    return b"".join(out)
