"""The worker shares no kernel state with the host (issue 41): the cheaters that beat the
namespaces through what they do not separate, against the evaluator, on the toy target.

- keyrings: an output cache in the host user's keyring (found by serial in /proc/keys), one in
  the session keyring the harness runs in, and a copy of every input handed over where a host
  process reads it back; the refused system calls, inside the sandbox and outside it;
- the view: a copy of the hidden assets elsewhere on the host is not there;
- the freezer: a fork-and-exit chain makes no progress while its worker is paused;
- the memory bound: a worker that takes more than its bound (anonymous memory, or memfds and its
  /tmp) is the one that dies, and the row says why.

Each test checks what the cheat would have gained (a key the host can read, a file read, a
counter that moved, a worker that lived) and that it did not happen. Where one worker can prove
several things, one worker runs them (a worker's start is most of a test's cost).

A new cheater: a file in tests/cheaters/ with build_decoder(model, example) and a docstring that
says what it gains and what stops it; its settings as CHEAT_* variables, set in its source by
`cheater(name, folder, CHEAT_X=...)`; several of them in one worker with `bundle(folder, names)`
(each one's build, then each one's forward on every call). What it did goes in its `info` (see
`info(facts)`); the test's verdict rests on what the host sees.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from conftest import use
from harness import _common
from harness.target import assets
from harness.sandbox import boundary, cgroup, cgroup_make, seccomp, worker_policy
from harness.measure import process
from harness.measure.session import Session
from test_cheaters_isolation import bundle, cheater, info

import _keys  # (the keyring calls, from the host's side)

PROBE = Path(__file__).resolve().parent / "_syscall_probe.py"
EPERM = 1
MEMORY_BOUND_GB = 1.0   # the hog tests' worker_memory_gb: the toy's worker holds a few hundred MB
HOG_GB = 2.0


def _has_cap(bit: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


# --- keyrings and the other refused calls ---------------------------------------------------------

def test_the_refused_calls_fail_inside_and_not_outside(at_toy: Path) -> None:
    """tests/_syscall_probe.py in the worker's sandbox (its real policy: the filter bwrap loads for
    the worker and every rank) and outside it: every call harness/sandbox/seccomp.py lists gets EPERM
    inside, none of them does outside (the keyring calls succeed there), and the calls the
    worker needs (sockets, fcntl, memfd) still work inside."""
    if seccomp.program() is None:
        pytest.skip("no seccomp filter for this architecture")
    policy = worker_policy.policy(at_toy / "optimize.py", [], worker_policy.Gpus(), _common.load_goals(),
                                   boundary.SCRATCH)
    argv, fds = boundary.wrap([sys.executable, "-S", str(PROBE)], boundary.Policy(
        shown=(*policy.shown, (str(PROBE), str(PROBE))), links=policy.links, masked=policy.masked, env=policy.env))
    try:
        inside = subprocess.run(argv, pass_fds=fds, capture_output=True, text=True, timeout=60, env=dict(policy.env))
    finally:
        for fd in fds:
            os.close(fd)
    outside = subprocess.run([sys.executable, "-S", str(PROBE)], capture_output=True, text=True, timeout=60)
    got_in, got_out = json.loads(inside.stdout or "{}"), json.loads(outside.stdout or "{}")
    assert got_in and got_out, (inside.stderr[-1000:], outside.stderr[-1000:])
    assert set(got_in["refused"]) == set(seccomp.refused()), "the probe and the filter's list differ"
    allowed = {call: e for call, e in got_in["refused"].items() if e != EPERM}
    assert not allowed, f"calls the worker may still make: {allowed}"
    assert not any(got_in["controls"].values()), f"a call the worker needs is refused: {got_in['controls']}"
    same = [call for call, e in got_out["refused"].items() if e == EPERM]
    assert not same, f"refused outside the sandbox too (the test proves nothing for them): {same}"
    assert all(got_out["refused"][c] == 0 for c in ("add_key", "keyctl")), got_out["refused"]
    # Locks and page-cache advice: 0 inside without effect (no lock of the probe's in /proc/locks),
    # RWF_NOWAIT "not supported"; outside the locks are listed and preadv2(RWF_NOWAIT) works.
    assert set(got_in["ignored"]) == set(seccomp.answered(seccomp.IGNORE)), "the probe and the filter's list differ"
    assert set(got_in["unsupported"]) == set(seccomp.answered(seccomp.UNSUPPORTED)), "the probe and the filter's list differ"
    assert not any(got_in["ignored"].values()), f"an ignored call failed inside: {got_in['ignored']}"
    assert got_in["locks_listed"] == 0, f"the worker's locks are listed in /proc/locks: {got_in['locks_listed']}"
    assert got_out["locks_listed"] == 5, f"outside, the probe's 5 locks are not all listed: {got_out['locks_listed']}"
    assert set(got_in["unsupported"].values()) == {errno.EOPNOTSUPP}, got_in["unsupported"]
    assert got_out["unsupported"]["preadv2(RWF_NOWAIT)"] == 0, got_out["unsupported"]


FAMILIES = {"host keyring cache": "cache", "session keyring cache": "session", "exfiltrated inputs": "exfil"}


def _left_by(marker: str) -> dict[str, list[str]]:
    """The marker's keys of each family that a host process reaches: in this process's user
    keyring (the host user's) or its session keyring (which the worker inherited)."""
    found: dict[str, list[str]] = {family: [] for family in FAMILIES}
    for family, word in FAMILIES.items():
        for _, desc in _keys.keys_named(f"auto-optim-{word}-{marker}-"):
            if _keys.search(_keys.USER, desc) > 0 or _keys.search(_keys.SESSION, desc) > 0:
                found[family].append(desc)
    return found


def _leaked_inputs(marker: str, hidden: list[bytes]) -> int:
    """How many of the hidden inputs a host process reads back, byte for byte, from the keys the
    exfiltrating cheater left in the host user's keyring."""
    parts: dict[str, dict[int, bytes]] = {}
    for _, desc in _keys.keys_named(f"auto-optim-exfil-{marker}-"):
        serial = _keys.search(_keys.USER, desc)
        data = _keys.read(serial) if serial > 0 else None
        if data is not None:
            n, part = desc.rsplit("-", 1)[1].split(".")
            parts.setdefault(n, {})[int(part)] = data
    copies = {b"".join(p[k] for k in sorted(p)) for p in parts.values()}
    return sum(h in copies for h in hidden)


def _forget(marker: str) -> None:
    """Remove the cheaters' keys (not this process's session keyring: without it, the keys of the
    user's keyring are no longer this process's to remove)."""
    for word in FAMILIES.values():
        for serial, _ in _keys.keys_named(f"auto-optim-{word}-{marker}-"):
            _keys.invalidate(serial)


def _copies_of_assets(assets: Path, tag: str) -> list[Path]:
    """The hidden assets (inputs, references, pool) copied where a person might keep them: under
    /var/tmp and in the home folder (outside the project, outside /tmp, which the worker has of its own)."""
    places = [Path("/var/tmp") / f"auto-optim-test-{tag}", Path.home() / ".cache" / f"auto-optim-test-{tag}"]
    for place in places:
        place.mkdir(parents=True)
        for entry in assets.iterdir():
            if entry.name.startswith(("input_", "reference_", "pool_")):
                (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, place / entry.name)
    return places


def test_no_state_in_keyrings_and_no_copy_of_the_assets(at_toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capfd: pytest.CaptureFixture) -> None:
    """In one worker: caches_in_host_keyring, caches_in_session_keyring (this process joins a
    session keyring of its own first, which the harness and its worker inherit), exfiltrates_inputs,
    resets_oom_score and reads_asset_copies (copies under /var/tmp and the home folder). Nothing
    of the worker's may reach a keyring a host process reads, no hidden input may come back from
    one, no copy of the assets may be read (the cheater would fail the gate), and, where the
    harness holds CAP_SYS_RESOURCE, the OOM preference set before the worker started stays.

    The run is made where this machine gives the worker no cgroup (cgroup_make.make patched: a
    non-root user without delegation), which the row and one line on stderr must say."""
    tag = uuid.uuid4().hex[:12]
    assert _keys.join_session(f"auto-optim-test-{tag}") > 0, "no session keyring could be made here"
    copies = _copies_of_assets(assets.assets_dir(), tag)
    monkeypatch.setattr(cgroup_make, "make", lambda memory_bytes, tasks=None: (None, "no cgroup could be made for the worker (the test's)"))
    names = ["caches_in_host_keyring", "caches_in_session_keyring", "exfiltrates_inputs", "resets_oom_score",
             "reads_asset_copies"]
    path = bundle(tmp_path / "c", names, CHEAT_MARKER=tag, CHEAT_COST_S="0", CHEAT_COPIES=":".join(map(str, copies)))
    try:
        with Session(path, "tiny", "cpu") as s:
            f = s.measure()
            hidden = [s.bench_x.numpy().tobytes(), *(p["input"].numpy().tobytes() for p in s.pool)]
        left, leaked = _left_by(tag), _leaked_inputs(tag, hidden)
    finally:
        _forget(tag)
        for place in copies:
            shutil.rmtree(place, ignore_errors=True)
    said = info(f)
    problems = []  # every cheat that worked, not just the first
    for (family, keys), name in zip(left.items(), names):
        if keys:
            problems.append(f"{family}: the worker's keys reach a host process: {keys[:3]} ({said.get(name)})")
    if leaked:
        problems.append(f"{leaked} hidden inputs read back from the host user's keyring, byte for byte ({said.get(names[2])})")
    if not f["passed"]:
        problems.append(f"{f['reason']}: read a copy of the assets? {said.get('reads_asset_copies')}")
    assert not problems, "\n".join(problems)
    for name in names[:3]:
        assert said[name]["tried"]["add_key"] == os.strerror(EPERM), said[name]
    if _has_cap(24):  # CAP_SYS_RESOURCE: the preference's floor is set, the worker cannot lower it
        assert said["resets_oom_score"]["after"] == "1000", said["resets_oom_score"]
    assert said["resets_oom_score"]["before"] == "1000", said["resets_oom_score"]
    assert "paused by signals" in f["sandbox"] and "no memory bound" in f["sandbox"], f["sandbox"]
    notes = [ln for ln in capfd.readouterr().err.splitlines() if "no cgroup could be made" in ln]
    assert len(notes) == 1, notes


# --- the freezer ------------------------------------------------------------------------------------

def _soon(check, within_s: float = 10.0) -> bool:
    """Whether check() holds within within_s (a loaded machine is slow to schedule a chain)."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_paused_worker_makes_no_progress(at_toy: Path, tmp_path: Path) -> None:
    """hops_while_frozen: a chain of processes that fork and exit, each counting in the worker's
    /tmp. While the worker is paused (as while its rival is timed, harness/measure/alternate.py) the count
    must not move; once resumed it does (the chain is alive: the check proves something)."""
    tag = uuid.uuid4().hex[:12]
    with Session(cheater("hops_while_frozen", tmp_path / "c", CHEAT_MARKER=tag), "tiny", "cpu") as s:
        facts = s.begin()
        assert facts["status"] == "measured", facts["reason"]
        # the counter in the sandbox's /tmp, through a process that lives as long as the worker: the
        # oldest of its descendants that sees it (the chain's own processes come and go)
        def started(pid: int) -> float:
            try:
                return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
            except OSError:
                return float("inf")  # gone since

        def seen(pid: int) -> bool:
            try:
                return Path(f"/proc/{pid}/root{info(facts)['counter']}").exists()
            except OSError:
                return False

        assert _soon(lambda: any(seen(p) for p in process.descendants(s.worker.proc.pid))), "no counter: the chain never started"
        inner = min((p for p in process.descendants(s.worker.proc.pid) if seen(p)), key=started)
        counter = Path(f"/proc/{inner}/root{info(facts)['counter']}")

        def count() -> int:
            return int(counter.read_text().strip() or 0)

        assert _soon(lambda: count() >= 3), "the chain never started: the test would prove nothing"
        moved, alive = [], []
        for _ in range(2):
            assert s.pause() is None
            before = count()
            time.sleep(0.5)
            moved.append(count() - before)
            s.resume()
            after = count()
            alive.append(_soon(lambda: count() > after))
        label = facts["sandbox"]
    assert moved == [0, 0], f"the chain ran {moved} steps while its worker was paused ({label})"
    assert all(alive), f"the chain did not run again once resumed ({alive}): the test proves nothing"
    assert "freezer" in label and "jumps of its own clock" in label, label


def _test_cgroup(name: str, version: int) -> cgroup.WorkerCgroup:
    """A bare cgroup of `version` with a freezer, as a worker's; the test is skipped where there is none."""
    if version == 2:
        group = cgroup_make._try_v2(name, 1 << 40, need_memory=True)  # as a worker's: on a GPU host the pids-only one refused its tasks
    else:
        freezer, _, made = cgroup_make._try_v1(name, None)
        group = cgroup.WorkerCgroup(freezer, None, None, made) if freezer else None
    if group is None:
        pytest.skip(f"no cgroup v{version} freezer here")
    return group


@contextlib.contextmanager
def _sleeping_in(group: cgroup.WorkerCgroup) -> Iterator[subprocess.Popen]:
    """`sleep 600` started in the group; afterwards, however the test ends, thawed, killed, and the group removed."""
    proc = subprocess.Popen(cgroup.entering(group, ["sleep", "600"]), start_new_session=True)
    try:
        assert _soon(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep")), "never started"
        yield proc
    finally:
        group.thaw()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        group.remove()


@pytest.mark.parametrize("version", [1, 2])
def test_the_freezer_of_each_cgroup_version(version: int) -> None:
    """harness/sandbox/cgroup.py's freeze and thaw on a bare fork-and-exit chain (no worker, no torch), for
    each cgroup version this machine has (a hybrid one has both: v1's freezer, v2's cgroup.freeze)."""
    group = _test_cgroup(f"{cgroup.PREFIX}{os.getpid()}-test-v{version}", version)
    chain = ("import os, sys, time\n"
             "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
             "while True:\n"
             "    os.pwrite(fd, b'%-31d' % (int(os.pread(fd, 32, 0) or b'0') + 1), 0)\n"
             "    time.sleep(0.001)\n"
             "    if os.fork():\n"
             "        os._exit(0)\n")
    counter = Path(f"/tmp/auto-optim-test-chain-{uuid.uuid4().hex[:8]}")
    proc = subprocess.Popen(cgroup.entering(group, [sys.executable, "-S", "-c", chain, str(counter)]))
    try:
        def count() -> int:
            return int(counter.read_text().strip() or 0) if counter.exists() else 0

        assert _soon(lambda: count() >= 3), "the chain never started"
        assert group.freeze()
        before = count()
        time.sleep(0.3)
        frozen = count() - before
        group.thaw()
        assert frozen == 0, f"the chain ran {frozen} steps while frozen"
        assert _soon(lambda: count() > before), "the chain did not run again once thawed"
    finally:
        group.remove()
        proc.wait(timeout=10)
        counter.unlink(missing_ok=True)
    assert not group.made


@pytest.mark.parametrize("version", [1, 2])
def test_a_paused_worker_can_be_killed(version: int) -> None:
    """A worker killed while frozen (a rival the harness stops during a failure, as test_fail_fast's
    broken candidate did under load) must not hang the harness: v1's freezer holds even SIGKILL
    until the cgroup thaws, and kill_tree waits for its victims (harness/sandbox/cgroup_make.py thaw_processes)."""
    import threading

    group = _test_cgroup(f"{cgroup.PREFIX}{os.getpid()}-test-kill-v{version}", version)
    with _sleeping_in(group) as proc:
        assert group.freeze()
        if version == 1:  # the wall this test is about: a frozen v1 process outlives a SIGKILL
            os.kill(proc.pid, signal.SIGKILL)
            time.sleep(0.5)
            assert proc.poll() is None, "v1's freezer let SIGKILL through: the test proves nothing here"
        others = {process.session_of(p) for p in process.children() if p != proc.pid}  # this test's only
        killer = threading.Thread(target=process.kill_tree, args=(proc, others), daemon=True)
        killer.start()
        killer.join(timeout=20)
        assert not killer.is_alive(), "kill_tree hung on a frozen worker"
        assert proc.poll() is not None, "the frozen worker outlived kill_tree"


def test_a_dead_harness_leaves_no_frozen_worker() -> None:
    """A harness killed while its worker was paused: bwrap's --die-with-parent sends the worker
    SIGKILL, which v1's freezer holds for ever. The next harness's sweep of dead owners' cgroups
    thaws it, so it dies, and removes the cgroup."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer exists: the owner the cgroup's name gives is dead
    group = _test_cgroup(f"{cgroup.PREFIX}{gone.pid}-test-sweep", 1)
    folder = group.freezer[1]
    with _sleeping_in(group) as proc:
        assert group.freeze()
        # what --die-with-parent sends; v1's freezer holds it (test_a_paused_worker_can_be_killed proves
        # that on a cgroup no sweep touches: this one's dead owner invites any harness's sweep at once)
        os.kill(proc.pid, signal.SIGKILL)
        cgroup_make._sweep(folder.parent)
        assert _soon(lambda: proc.poll() is not None), "the orphaned frozen worker still lives after the sweep"
        assert _soon(lambda: (cgroup_make._sweep(folder.parent), not folder.exists())[1]), "its cgroup was not removed"


# --- the memory bound ---------------------------------------------------------------------------

@pytest.fixture
def bounded(toy: Path, tmp_path: Path) -> Path:
    """The toy's workspace with a small worker memory bound (goals.json "worker_memory_gb")."""
    ws = shutil.copytree(toy, tmp_path / "ws", symlinks=True)
    goals = json.loads((ws / "goals.json").read_text())
    (ws / "goals.json").write_text(json.dumps({**goals, "worker_memory_gb": MEMORY_BOUND_GB}))
    with use(ws):
        yield ws


@pytest.mark.parametrize("how", ["anon", "shmem"])
def test_a_worker_past_its_memory_bound_is_the_one_that_dies(bounded: Path, tmp_path: Path, how: str) -> None:
    """hogs_memory: twice the bound, in its own memory ("anon") or in memfds and its /tmp
    ("shmem", in no process's resident set). Without a bound it passes; with one the kernel kills
    it inside its cgroup, this process (the harness) lives on, and the row says why."""
    group, why = cgroup_make.make(int(MEMORY_BOUND_GB * cgroup.GB))
    if group is not None:
        group.remove()
    if group is None or group.memory is None:
        pytest.skip(f"no memory cgroup here: {why}")
    with Session(cheater("hogs_memory", tmp_path / "c", CHEAT_HOG=how, CHEAT_HOG_GB=str(HOG_GB)), "tiny", "cpu") as s:
        f = s.measure()
    assert not f["passed"] and f["status"] == "crash", f"the worker held {HOG_GB} GB past its bound: {f['status']} {f['reason']}"
    assert f"memory bound of {MEMORY_BOUND_GB:g} GB" in f["reason"] and "\n" not in f["reason"], f["reason"]


# --- the policy -----------------------------------------------------------------------------------

def test_the_view_is_built_from_an_allow_list(at_toy: Path) -> None:
    """The worker's policy (one printable object) shows the system's folders, the interpreter's and
    the project's pieces, nothing of the folders a person keeps things in, and no credentials of
    /etc; bwrap starts from an empty root, made read-only, not from the host's `/`."""
    goals = _common.load_goals()
    projects = [Path(worker_policy.HARNESS.parent), _common.root()]
    policy = worker_policy.policy(at_toy / "optimize.py", [], worker_policy.Gpus(), goals, boundary.SCRATCH)
    prefixes = {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix)}
    prefixes |= {Path(p) for p in worker_policy.extra_tools(dict(os.environ))}  # CC=/opt/gcc/bin/gcc: its folders

    def allowed(dest: Path) -> bool:
        inside = [t for t in (*projects, *prefixes) if dest == t or t in dest.parents]
        return bool(inside) or not any(dest == Path(top) or Path(top) in dest.parents
                                       for top in ("/home", "/root", "/work", "/srv", "/mnt", "/opt", "/var", "/media"))

    shown = [Path(d) for d, _ in policy.shown]
    assert all(allowed(d) for d in shown), [str(d) for d in shown if not allowed(d)]
    etc = {d.relative_to("/etc").parts[0] for d in shown if Path("/etc") in d.parents}
    assert etc and not etc & {"shadow", "gshadow", "ssh", "pip.conf", "npmrc", "sudoers", "security"}, etc
    assert Path("/") not in shown and Path("/usr") in shown and Path("/sys/devices/system/cpu") in shown
    sys_shown = [d for d in shown if Path("/sys") in d.parents or d == Path("/sys")]  # an allow-list of /sys
    assert all(any(d == Path(a) or Path(a) in d.parents for a in ("/sys/devices", "/sys/module")) for d in sys_shown), sys_shown
    argv, fds = boundary.wrap(["true"], policy)
    for fd in fds:
        os.close(fd)
    pairs = list(zip(argv, argv[1:], argv[2:]))
    assert ("--ro-bind", "/", "/") not in pairs and ("--remount-ro", "/", "--remount-ro") in pairs
    printed = str(policy)
    assert "read-only" in printed and "environment:" in printed and "writable:" in printed


def test_a_worker_the_kernel_cannot_freeze_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """harness/measure/alternate.py: a rival whose freeze did not complete (its worker already stopped by
    Session.pause) fails, before the other worker's call is timed beside it."""
    from harness.measure import alternate

    class Rival:
        def __init__(self, why: str | None) -> None:
            self.why, self.failed, self.resumed = why, None, False

        def pause(self) -> str | None:
            return self.why

        def resume(self) -> None:
            self.resumed = True

        def fail(self, facts: dict, status: str, reason: str) -> None:
            facts.update(status=status, reason=reason)
            self.failed = reason

    timed, stuck = Rival(None), Rival("the kernel could not freeze the worker within 10 s")
    facts = {timed: {"status": "measured"}, stuck: {"status": "measured"}}
    alternate._only(timed, (timed, stuck), facts)
    assert timed.resumed and facts[stuck]["status"] == "crash" and "could not freeze" in facts[stuck]["reason"]
    alternate._only(stuck, (timed, stuck), {})  # before its facts exist (being built): no failure to record


@pytest.mark.parametrize("own", ["/", "/system.slice/harness.service"])
def test_a_cgroup_v2_host_gets_one_cgroup_with_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own: str) -> None:
    """Where the GPU machines likely are (cgroup v2 only, root): the worker's cgroup has both the
    freezer and the memory bound. Below the harness's own cgroup where that is the root; beside it
    where the harness's cgroup holds processes (the kernel refuses to hand such a cgroup's children
    the memory controller: EBUSY). A stand-in for cgroupfs (this machine's controllers are v1's):
    a folder made there gets cgroup.freeze, and memory.max where its parent hands out memory."""
    import errno as errno_

    root = tmp_path / "cgroup2"
    mine = root / own.strip("/")
    mine.mkdir(parents=True, exist_ok=True)
    for folder in {root, mine, mine.parent}:
        (folder / "cgroup.controllers").write_text("memory pids\n")
        (folder / "cgroup.subtree_control").write_text("" if folder in (root, mine) else "memory pids\n")
    monkeypatch.setattr(cgroup_make, "_mounts", lambda: [cgroup_make.Mount(2, "/", root, frozenset())])
    monkeypatch.setattr(cgroup_make, "_own_paths", lambda: {"": own})
    real_write, real_mkdir = cgroup_make._write, Path.mkdir

    def write(path: Path, text: str) -> None:
        if path == mine / "cgroup.subtree_control" and mine != root:
            raise OSError(errno_.EBUSY, "a cgroup with processes hands its children no controller")
        real_write(path, text)

    def new_folder(home: Path, name: str) -> Path:
        folder = home / name
        real_mkdir(folder)
        (folder / "cgroup.freeze").write_text("0\n")
        (folder / "cgroup.procs").write_text("")
        if "memory" in (home / "cgroup.subtree_control").read_text():
            for f in ("memory.max", "memory.swap.max", "memory.oom.group"):
                (folder / f).write_text("max\n")
        if "pids" in (home / "cgroup.subtree_control").read_text():
            (folder / "pids.max").write_text("max\n")
        return folder

    monkeypatch.setattr(cgroup_make, "_write", write)
    monkeypatch.setattr(cgroup_make, "_new_folder", new_folder)
    group, note = cgroup_make.make(3_000_000_000)
    assert group is not None and note == "", note
    assert group.freezer == group.memory == (2, group.made[0]) and len(group.made) == 1, group
    assert group.made[0].parent == (root if own == "/" else mine.parent), group.made
    assert (group.made[0] / "memory.max").read_text() == "3000000000"
    assert (group.made[0] / "memory.swap.max").read_text() == "0" and (group.made[0] / "memory.oom.group").read_text() == "1"
    assert group.tasks == (2, group.made[0]) and (group.made[0] / "pids.max").read_text() == str(cgroup.DEFAULT_TASKS), group
    assert "cgroup v2" in group.label() and "memory bound 3 GB" in group.label()


def test_a_compiler_outside_the_system_folders_is_shown_whole(tmp_path: Path) -> None:
    """CC=/opt/gcc/bin/gcc (as on the GPU hosts): Triton's build of its launcher runs cc1 from
    libexec/ and links crt files from lib/; showing bin/ alone crashed every Triton candidate in
    the sandbox on an H100 (CalledProcessError from gcc). The prefix's own folders are shown, not
    its parent's neighbours."""
    prefix = tmp_path / "gcc"
    for d in ("bin", "lib", "libexec", "include"):
        (prefix / d).mkdir(parents=True)
    (prefix / "bin" / "gcc").write_text("")
    (tmp_path / "neighbour").mkdir()
    shown = worker_policy.extra_tools({"CC": str(prefix / "bin" / "gcc")})
    assert sorted(shown) == sorted(str(prefix / d) for d in ("bin", "lib", "libexec", "include")), shown
    assert worker_policy.compiler_prefix("/bin") == []  # /bin/gcc: never the whole root
