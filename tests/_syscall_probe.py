"""Tries every system call the worker's seccomp filter refuses (harness/sandbox/seccomp.py), with
arguments that succeed, or fail for another reason than EPERM, on an ordinary Linux host, and a
few calls the worker needs (the controls); the calls the filter answers without running them (the
file locks and page-cache advice: `ignored`, and how many of the probe's own locks /proc/locks
lists) and RWF_NOWAIT (`unsupported`). Prints {"refused": {call: errno or 0}, "ignored": ...,
"locks_listed": N, "unsupported": ..., "controls": ...} as one JSON line. Standard library only, numbers from the kernel's headers (asm/unistd_64.h,
asm-generic/unistd.h), not from the harness: tests/test_cheaters_walls.py runs it inside the
worker's sandbox and outside it."""

import ctypes
import fcntl
import json
import mmap
import os
import platform
import socket
import struct

libc = ctypes.CDLL(None, use_errno=True)
N = {"x86_64": dict(add_key=248, request_key=249, keyctl=250, bpf=321, perf_event_open=298, userfaultfd=323,
                    fanotify_init=300, inotify_init=253, inotify_init1=294, kcmp=312, process_vm_readv=310,
                    process_vm_writev=311, name_to_handle_at=303, open_by_handle_at=304, mincore=27, cachestat=451,
                    syslog=103, io_uring_setup=425, process_madvise=440, flock=73, fadvise64=221, readahead=187),
     "aarch64": dict(add_key=217, request_key=218, keyctl=219, bpf=280, perf_event_open=241, userfaultfd=282,
                     fanotify_init=262, inotify_init1=26, kcmp=272, process_vm_readv=270, process_vm_writev=271,
                     name_to_handle_at=264, open_by_handle_at=265, mincore=232, cachestat=451, syslog=116,
                     io_uring_setup=425, process_madvise=440, flock=32, fadvise64=223, readahead=213)}[platform.machine()]
L = ctypes.c_long
def call(name, *args):
    r = libc.syscall(N[name], *args)
    return 0 if r >= 0 else ctypes.get_errno()
page = mmap.mmap(-1, 4096); page[0] = 1
addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
vec = ctypes.create_string_buffer(1)
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"probe-{os.getpid()}")
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600); os.write(fd, b"x")
dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
pid = os.getpid()
res = {
    "add_key": call("add_key", b"keyring", b"auto-optim-probe", None, L(0), L(-2)),
    "request_key": call("request_key", b"user", b"auto-optim-probe-absent", None, L(0)),
    "keyctl": call("keyctl", L(0), L(-2), L(1)),
    "bpf": call("bpf", L(0xffff), None, L(0)),
    "perf_event_open": call("perf_event_open", None, L(0), L(-1), L(-1), L(0)),
    "userfaultfd": call("userfaultfd", L(0xffffffff)),
    "fanotify_init": call("fanotify_init", L(0xffffffff), L(0)),
    "inotify_init1": call("inotify_init1", L(0)),
    "kcmp": call("kcmp", L(pid), L(pid), L(1), L(0), L(0)),
    "process_vm_readv": call("process_vm_readv", L(pid), None, L(0), None, L(0), L(0)),
    "process_vm_writev": call("process_vm_writev", L(pid), None, L(0), None, L(0), L(0)),
    "name_to_handle_at": call("name_to_handle_at", L(-100), b"/", None, None, L(0)),
    "open_by_handle_at": call("open_by_handle_at", L(-1), None, L(0)),
    "mincore": call("mincore", L(addr), L(4096), vec),
    "cachestat": call("cachestat", L(fd), None, None, L(0)),
    "syslog": call("syslog", L(10), None, L(0)),
    "io_uring_setup": call("io_uring_setup", L(1), None),
    "process_madvise": call("process_madvise", L(-1), None, L(0), L(0), L(0)),
}
if "inotify_init" in N:
    res["inotify_init"] = call("inotify_init")
def errno_of(f):
    try:
        f(); return 0
    except OSError as e:
        return e.errno
res["socket(AF_VSOCK)"] = errno_of(lambda: socket.socket(40, socket.SOCK_STREAM).close())
res["fcntl(F_SETLEASE)"] = errno_of(lambda: fcntl.fcntl(fd, 1024, 2))
res["fcntl(F_NOTIFY)"] = errno_of(lambda: fcntl.fcntl(dfd, 1026, 0))
res["fcntl(F_GETLK)"] = errno_of(lambda: fcntl.fcntl(fd, 5, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 1, 0)))
res["fcntl(F_OFD_GETLK)"] = errno_of(lambda: fcntl.fcntl(fd, 36, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 1, 0)))
# Succeed without doing anything inside (the locks: none listed in /proc/locks); work outside.
os.write(fd, b"x" * 3 * 4096)
fd2 = os.open(path, os.O_RDWR)
m = mmap.mmap(-1, 4096)
ignored = {
    "flock": call("flock", L(fd), L(fcntl.LOCK_SH)),
    "fadvise64": call("fadvise64", L(fd), L(0), L(0), L(os.POSIX_FADV_DONTNEED)),
    "readahead": call("readahead", L(fd), L(0), L(4096)),
    "madvise(MADV_COLD)": errno_of(lambda: m.madvise(20)),
    "madvise(MADV_PAGEOUT)": errno_of(lambda: m.madvise(21)),
}
for cmd, name, offset, owner in ((6, "F_SETLK", 1000, fd), (7, "F_SETLKW", 2000, fd), (37, "F_OFD_SETLK", 3000, fd2),
                                 (38, "F_OFD_SETLKW", 4000, fd2)):
    ignored[f"fcntl({name})"] = errno_of(lambda: fcntl.fcntl(owner, cmd, struct.pack("hhqqi", fcntl.F_RDLCK, 0, offset, 1, 0)))
ino = f":{os.fstat(fd).st_ino} "
listed = [ln for ln in open("/proc/locks").read().splitlines() if ino in ln]
unsupported = {f"{c}(RWF_NOWAIT)": errno_of(lambda: f()) for c, f in (
    ("preadv2", lambda: os.preadv(fd, [bytearray(1)], 0, 8)), ("pwritev2", lambda: os.pwritev(fd, [b"x"], 0, 8)))}
controls = {"socket(AF_INET)": errno_of(lambda: socket.socket().close()), "fcntl(F_GETFD)": errno_of(lambda: fcntl.fcntl(fd, 1)),
            "memfd_create": errno_of(lambda: os.close(os.memfd_create("probe")))}
os.unlink(path)
controls["madvise(MADV_DONTNEED)"] = errno_of(lambda: m.madvise(mmap.MADV_DONTNEED))
controls["preadv2"] = errno_of(lambda: os.preadv(fd, [bytearray(1)], 0, 0))
print(json.dumps({"refused": res, "ignored": ignored, "locks_listed": len(listed), "unsupported": unsupported,
                  "controls": controls}))
