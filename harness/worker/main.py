"""The worker: the only process that runs candidate code. Started by harness/measure/session.py.

    python -I -B -u /path/to/harness/worker/main.py SOCKET INPUT OUTPUT   (the descriptors it inherited: `command`)

Its interpreter is isolated (-I): neither the working folder nor the script's folder nor
PYTHONPATH nor the user's site-packages is on sys.path, and no PYTHON* variable is read, so
nothing of the project root (which the agent writes: a planted pathlib.py, sitecustomize.py or
usercustomize.py) is imported before the walls are up. The harness package is imported from this
file's own folder by path (`_harness_from_its_folder`), the project root kept off sys.path; the
environment's absolute PYTHONPATH folders outside the project come back after Landlock
(harness/worker/imports.py). The project root never goes on sys.path: of its top-level modules
and packages only the frozen code's are importable (imports.py `FROM_ROOT`: the adapter's package,
those of goals.json "frozen", the root modules the candidate's source imports, and what these
import: harness/measure/worker_process.py project_names), so a module planted there under a name that torch or a library
tries and does not find (opt_einsum, dill, pynvml, ...) is not imported, in a keeper's worker
or a candidate's. The candidate's own folder (`candidate_home`, where it holds helpers) is importable
as a script's is; of that folder the worker is shown the helpers only (worker_policy.candidate_helpers).

Its life, in order:
 0. move its descriptors to 3, 4 and 5, close every other, and start again as
    `command(3, 4, 5)`: the numbers the harness had free depend on the tool that
    started it (run_experiment holds lock files, verify does not), and a candidate could read
    them in /proc/self; now every tool's worker looks the same;
 1. read the configuration from the harness;
 2. where the preset has several ranks, start the group's other ranks (harness/worker/worker_group.py:
    `python -I -B -u harness/worker/main.py --rank FD`, which run the same handlers); then apply Landlock
    (harness/sandbox/landlock.py), the second wall inside the namespaces the harness started it in
    (harness/sandbox/boundary.py), while it still has one thread and no candidate code;
 3. import torch, map the two shared buffers (harness/measure/shared.py); import the candidate from the
    source bytes the harness sent (not from the file, which the agent may be editing), written
    to the path the harness names (`candidate`: the same for a keeper and a candidate, in the
    worker's own /tmp: neither its path nor its folder tells a worker its role), then load
    the frozen model. A candidate that cannot be imported loads no model: its failure is the answer
    to "build", seconds after the start, not minutes later (a model load, the keeper's build);
 4. time the boundary for the harness: copy an output-sized tensor into the shared output buffer,
    before the candidate is built (its module's own code has run: the figure is information);
 5. build the candidate with an example input;
 6. answer calls: run forward_fn on the shared input buffer, copy the result into the shared
    output buffer, synchronize, say "done". Every call looks the same: the worker is never told
    whether a call is a warm-up, timed, checked or profiled, nor which tool started it;
 7. on "exit", leave at once (os._exit): no interpreter teardown (half a second of CPU with torch
    loaded), no finalizers or atexit handlers of the candidate's. The harness kills whatever is
    left either way.

Nothing here is trusted once the candidate is imported (step 3): its code can patch any of it. The harness therefore
believes only the output buffer and the moment "done" arrives (it takes the time itself and
checks every output); what the worker reports besides (info, profile, each call's host figures) is informational.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def _harness_from_its_folder() -> None:
    """Import the harness package from its folder (this file's parent's), by path: the project
    root, which holds it and which the agent writes, is never on sys.path (-I leaves out the
    script's folder and the working folder; imports.py FROM_ROOT imports what the worker needs of it)."""
    here = Path(__file__).resolve().parents[1]  # harness/
    if "harness" not in sys.modules:
        spec = importlib.util.spec_from_file_location("harness", here / "__init__.py", submodule_search_locations=[str(here)])
        module = importlib.util.module_from_spec(spec)
        sys.modules["harness"] = module
        spec.loader.exec_module(module)


if __name__ == "__main__":  # a worker; imported (tests, tools), the harness is already there
    _harness_from_its_folder()
from harness.sandbox import landlock  # noqa: E402  (standard library only)
from harness.worker import worker_group
from harness.measure.channel import Channel  # noqa: E402
from harness.worker.calls import CHANNEL_FD, INPUT_FD, OUTPUT_FD, Worker, failure  # noqa: E402
from harness.worker.imports import import_path_after_walls  # noqa: E402


def command(*args: str | int) -> list[str]:
    """The command line of a worker interpreter (rank 0, or another rank of a group): isolated
    (-I: see the module's docstring), no bytecode written (-B), unbuffered output (-u: the harness
    reads its last lines)."""
    return [sys.executable, "-I", "-B", "-u", str(Path(__file__).resolve()), *map(str, args)]


FIRST_FREE_FD = 6


def settle_fds(given: list[int]) -> bool:
    """Put the inherited descriptors at 3, 4, 5 and close every other above 2. True when they
    moved, and this process must start again for its command line to be the same for every tool."""
    wanted = [CHANNEL_FD, INPUT_FD, OUTPUT_FD]
    if given != wanted:
        copies = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in given]  # above every target first
        for target, fd in zip(wanted, copies):
            os.dup2(fd, target, inheritable=True)
    os.closerange(FIRST_FREE_FD, os.sysconf("SC_OPEN_MAX"))
    return given != wanted


def serve(chan: Channel) -> None:
    cfg = chan.recv()
    os.environ["AUTO_OPTIM_GOALS"] = cfg["goals_path"]
    # Its OOM preference was set before it started, by the shell that started it, where it cannot
    # be undone from here (harness/sandbox/cgroup.py entering); so is its cgroup's memory bound.
    # A group's other ranks start first, so that each applies Landlock itself (it grants the
    # process's own /proc entry), while no candidate code exists anywhere (harness/worker/worker_group.py).
    group = worker_group.Group(cfg) if int(cfg.get("ranks", 1)) > 1 else None
    abi = restrict(cfg, group is not None)
    import_path_after_walls()
    t0 = time.perf_counter()
    if group:
        group.watch()
    worker = Worker(chan, cfg | {"store": group.store} if group else cfg)
    if group:
        abi = min(abi, group.await_ready())
    chan.send({"op": "ready", "landlock_abi": abi, "load_s": time.perf_counter() - t0})
    while True:
        op = chan.recv().get("op")
        if op == "exit":
            leave(0)
        handler = handler_of(worker, op)
        if handler is None:
            chan.send({"op": "error", "reason": f"unknown request {op!r}"})
            continue
        try:
            if group:
                group.forward(op)
            reply = handler()
            chan.send({"op": "done", **(group.gather(op, reply) if group else reply)})
        except Exception as e:  # noqa: BLE001 - any failure of the candidate is reported, then we carry on
            if group:  # before rank 0's traceback: a dead rank's own lines must end the output
                group.wait_for_dead_ranks()
            traceback.print_exc()
            chan.send({"op": "error", "reason": failure(op, e, cfg["candidate"])})


def serve_rank(chan: Channel) -> None:
    """Rank k > 0 of a worker group (harness/worker/worker_group.py): rank 0 forwards it every request,
    and it answers with the same handler. On any failure it prints why and exits: rank 0, which
    watches it, then ends the whole group (a rank left waiting in a collective would hang)."""
    cfg = chan.recv()
    rank = int(cfg["rank"])
    abi = restrict(cfg, group=True)
    import_path_after_walls()
    worker = Worker(chan, cfg, rank)
    chan.send({"op": "ready", "landlock_abi": abi})
    while True:
        try:
            op = chan.recv().get("op")
        except Exception:  # noqa: BLE001 - rank 0 is gone: so is the group
            leave(0)
        handler = handler_of(worker, op)
        try:
            if handler is None:
                raise RuntimeError(f"unknown request {op!r}")
            chan.send({"op": "done", **handler()})
        except Exception as e:  # noqa: BLE001 - the candidate's failure on this rank ends the group
            traceback.print_exc()
            print(f"rank {rank}: {failure(op, e, cfg['candidate'])}", file=sys.stderr, flush=True)
            leave(1)


def restrict(cfg: dict[str, Any], group: bool) -> int:
    """Apply the harness's Landlock rules to this process (a rank of a worker group: `group`); the ABI, 0 without."""
    if not cfg.get("landlock"):
        return 0
    # Its own /proc entry too: the CUDA driver writes there when it starts (seen on an H100).
    rules = cfg["landlock"]
    return landlock.restrict(rules["readable"], rules["listable"], rules["hidden"],
                             rules["writable"] + [f"/proc/{os.getpid()}"], group)


def handler_of(worker: Worker, op: Any):
    """The worker's method that answers request `op`, or None."""
    return getattr(worker, op) if op in ("calibrate", "build", "call", "profile", "flops", "memory") else None


def leave(code: int) -> None:
    """Exit at once: tearing down an interpreter that holds torch costs ~0.5 s of CPU."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    if sys.argv[1] == "--rank":  # another rank of a worker group, started by rank 0 (group.py)
        serve_rank(Channel(socket.socket(fileno=int(sys.argv[2]))))
        return
    if settle_fds([int(a) for a in sys.argv[1:4]]):
        argv = command(CHANNEL_FD, INPUT_FD, OUTPUT_FD)
        os.execv(argv[0], argv)
    chan = Channel(socket.socket(fileno=CHANNEL_FD))
    try:
        serve(chan)
    except landlock.Unavailable as e:
        chan.send({"op": "error", "reason": f"sandbox unavailable: {e}"})


if __name__ == "__main__":
    main()
