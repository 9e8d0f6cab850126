"""A started worker process (harness/worker.py) as the session sees it: what it is given (its
environment, its view of the files, what it may write) and the request/reply channel with
timeouts, with a teardown that leaves nothing running. The measuring logic is harness/session.py's.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import _common
from harness import nvml, replies, sandbox
from harness.channel import Channel, ChannelClosed
from harness.process import Tail, become_subreaper, kill_tree

HARNESS = Path(__file__).resolve().parent
# What of the harness's environment the worker gets: what its libraries read (and the variables
# goals.json "worker_env" names, which its model reads), and nothing else.
WORKER_ENV = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH", "CC", "CXX",
              "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
WORKER_ENV_PREFIXES = ("LC_", "CUDA_", "CUDNN_", "CUBLAS", "NCCL_", "TORCH", "PYTORCH_", "TRITON_",
                       "OMP_", "MKL_", "OPENBLAS_", "KMP_")


LIVE: set[int] = set()  # this process's workers not yet closed: their pids, each its session's id


class Failed(Exception):
    """The candidate failed: `status` is gate_fail, crash or timeout; the message is one line."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(replies.one_line(reason, 500))
        self.status = status


class WorkerProcess:
    """A started worker: request/reply with timeouts, and a teardown that leaves nothing running."""

    def __init__(self, cfg: dict[str, Any], buffer_fds: list[int], env: dict[str, str], view: sandbox.View | None,
                 timeouts: dict[str, float]) -> None:
        become_subreaper()
        self.timeouts = timeouts
        parent, child = socket.socketpair()
        fds = [child.fileno(), *buffer_fds]  # the worker moves them to 3, 4, 5 (worker.settle_fds)
        argv = [sys.executable, "-m", "harness.worker", *map(str, fds)]
        argv, extra = sandbox.wrap(argv, view) if view else (argv, [])
        self.proc = subprocess.Popen(
            argv, cwd=HARNESS.parent, env=env, pass_fds=[*fds, *extra], start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        child.close()
        for fd in extra:
            os.close(fd)
        self.tail = Tail(self.proc.stdout)
        self.chan = Channel(parent)
        self.hung = False  # it let a request time out: it is not listening for "exit"
        try:
            self.chan.send(cfg)
        except ChannelClosed as e:  # it never started: bwrap's own output says why
            raise Failed("crash", self.death(str(e))) from None
        LIVE.add(self.proc.pid)  # only once started: one that failed to start is not spared

    def request(self, op: str, timeout: float) -> dict[str, Any]:
        self.chan.send({"op": op})
        return self.reply(op, timeout)

    def reply(self, op: str, timeout: float) -> dict[str, Any]:
        try:
            msg = self.chan.recv(timeout)
        except TimeoutError:
            self.hung = True
            raise Failed("timeout", f"worker gave no answer to '{op}' within {timeout:.0f} s") from None
        except ChannelClosed as e:
            raise Failed("crash", self.death(str(e))) from None
        if msg.get("op") == "error":
            raise Failed("crash", str(msg.get("reason", "worker error")))
        if msg.get("op") != ("ready" if op == "start" else "done"):
            raise Failed("crash", f"the worker answered '{op}' with {replies.one_line(repr(msg.get('op')), 40)}")
        return msg

    def death(self, why: str) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"worker stopped talking ({why})"
        signal_nr = -code if code < 0 else code - 128 if code > 128 else 0  # bwrap reports a signal as 128 + n
        how = f"killed by signal {signal_nr}" + (" (out of memory?)" if signal_nr == 9 else "") if signal_nr \
            else f"exited with code {code}"
        last = " | ".join(self.tail.last(3))
        return f"worker {how}" + (f": {last}" if last else "")

    def close(self) -> None:
        try:
            if not self.hung:  # a hung one would only run out the 5 s before it is killed
                self.chan.send({"op": "exit"})
                self.proc.wait(timeout=5)
        except (ChannelClosed, subprocess.TimeoutExpired):
            pass
        LIVE.discard(self.proc.pid)
        kill_tree(self.proc, spare=LIVE)  # a rival worker beside this one lives on
        self.chan.sock.close()


@dataclass(frozen=True)
class Gpus:
    """The GPUs a worker is given: CUDA devices 0..n-1 as the harness numbers them (a worker
    group's rank k runs on the k-th), by UUID (the worker's CUDA_VISIBLE_DEVICES, the same GPUs
    whatever CUDA numbers the ones it can open) and by device node (all the sandbox shows of them)."""

    uuids: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


def gpus(device: str, count: int, sandboxed: bool = True) -> Gpus:
    """The first `count` CUDA devices of this process for a sandboxed worker; none on a CPU or
    unsandboxed (that worker inherits the harness's CUDA_VISIBLE_DEVICES and sees every GPU).
    Refuses (SetupError) where NVML cannot name a device's node, or the node is not there: showing
    every GPU instead would let a candidate use one it was not given."""
    if device != "cuda" or not sandboxed:
        return Gpus()
    uuids = [nvml.device_uuid(k) for k in range(count)]
    nodes = [nvml.device_node(k) for k in range(count)]
    for k, uuid in enumerate(uuids):
        if uuid is None:
            raise _common.SetupError(f"CUDA device {k} has no UUID (torch.cuda.get_device_properties)")
    for k, node in enumerate(nodes):
        if node is None or not os.path.exists(node):
            raise _common.SetupError(f"cannot tell which /dev/nvidiaN is CUDA device {k} ({node or 'NVML did not answer'}; "
                                     "a MIG slice is not supported): the sandbox shows a worker only the GPUs it is given")
    return Gpus(uuids, nodes)


def view(candidate: Path, hidden: list[Path], gpu_nodes: list[str]) -> sandbox.View:
    """The project as the worker sees it: its code (the Python modules and packages at the top of
    the repository and of the target's folder: the harness, the adapter and what it imports), the
    goals file, the assets minus the hidden ones, the candidate's folder and the interpreter's
    paths; none of the records, locks, results or history. Of the host's GPUs, those of gpu_nodes."""
    projects = [HARNESS.parent, _common.root()]
    code = [e for top in projects for e in sorted(top.iterdir()) if e.suffix == ".py" or (e / "__init__.py").is_file()]
    home = candidate.parent  # importable, as a script's folder is (a project's: its code above)
    if home.resolve() not in {p.resolve() for p in projects}:
        code.append(home)
    python = {Path(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, *sys.path) if p and os.path.isdir(p)}
    visible = [HARNESS, _common.goals_path(), _common.assets_dir(), *code, *python]
    return sandbox.View(masked=projects, visible=visible, hidden=hidden, chdir=HARNESS.parent, gpus=gpu_nodes)


def writable(scratch: str, gpu_nodes: list[str], ranks: int = 1) -> list[str]:
    """What the worker may write (Landlock): its scratch folder and devices (of the GPUs, its own);
    a worker group's ranks also /dev/shm (NCCL's buffers between processes: the sandbox's own, gone with it)."""
    dev = [*sandbox.DEVICES, *gpu_nodes, "/dev/null", "/dev/zero", "/dev/full"]
    return [scratch] + [d for d in dev if os.path.exists(d)] + (["/dev/shm"] if ranks > 1 else [])


def environment(goals: Any, scratch: str, gpu_uuids: list[str]) -> dict[str, str]:
    """The parent's settings for the libraries the worker runs (WORKER_ENV: CUDA, torch, Triton,
    threads, paths), none of its other variables (a person's API tokens, the harness's own), its
    GPUs by UUID, and every cache in the scratch folder, gone with the worker: nothing it writes
    survives it."""
    named = WORKER_ENV | set(goals.get("worker_env", []))  # and what the target's model reads
    env = {k: v for k, v in os.environ.items() if k in named or k.startswith(WORKER_ENV_PREFIXES)}
    s = Path(scratch)
    env.update(TMPDIR=str(s), TRITON_CACHE_DIR=str(s / "triton"), TORCHINDUCTOR_CACHE_DIR=str(s / "inductor"),
               XDG_CACHE_HOME=str(s / "cache"), CUDA_CACHE_PATH=str(s / "nv"), MPLCONFIGDIR=str(s / "mpl"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    if gpu_uuids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_uuids)
    return env
