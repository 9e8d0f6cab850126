"""Tries every system call the worker's seccomp filter refuses (harness/seccomp.py), with
arguments that succeed, or fail for another reason than EPERM, on an ordinary Linux host, and a
few calls the worker needs (the controls). Prints {"refused": {call: errno or 0}, "controls": ...}
as one JSON line. Standard library only, numbers from the kernel's headers (asm/unistd_64.h,
asm-generic/unistd.h), not from the harness: tests/test_cheaters_walls.py runs it inside the
worker's sandbox and outside it."""

import ctypes
import fcntl
import json
import mmap
import os
import platform
import socket

libc = ctypes.CDLL(None, use_errno=True)
N = {"x86_64": dict(add_key=248, request_key=249, keyctl=250, bpf=321, perf_event_open=298, userfaultfd=323,
                    fanotify_init=300, inotify_init=253, inotify_init1=294, kcmp=312, process_vm_readv=310,
                    process_vm_writev=311, name_to_handle_at=303, open_by_handle_at=304, mincore=27, cachestat=451,
                    syslog=103, io_uring_setup=425),
     "aarch64": dict(add_key=217, request_key=218, keyctl=219, bpf=280, perf_event_open=241, userfaultfd=282,
                     fanotify_init=262, inotify_init1=26, kcmp=272, process_vm_readv=270, process_vm_writev=271,
                     name_to_handle_at=264, open_by_handle_at=265, mincore=232, cachestat=451, syslog=116,
                     io_uring_setup=425)}[platform.machine()]
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
controls = {"socket(AF_INET)": errno_of(lambda: socket.socket().close()), "fcntl(F_GETFD)": errno_of(lambda: fcntl.fcntl(fd, 1)),
            "memfd_create": errno_of(lambda: os.close(os.memfd_create("probe")))}
os.unlink(path)
print(json.dumps({"refused": res, "controls": controls}))
