"""The isolation cheaters (tests/cheaters/, the ones listed here) against the evaluator, on the toy
target: attacks on the process that measures (scheduling it, limiting it, freezing it, crashing
it through the shared buffers or malformed replies, forging what it prints) and on what lies
around the worker (records, scratch, processes and sockets that outlive it, the seeded input).

Each test is written against behaviour, not against how the harness isolates the worker: what the
cheat would have gained (a time below the honest cost, a file read, a process or file left
behind, a datagram received, a dead or hung harness, a forged line) and a check that it did not
happen. Attacks that endanger the process that measures (scheduling, prlimit, SIGBUS) run the
harness in a child process, so that a success fails the test instead of the test run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from conftest import made_once, made_once_fixture, make_toy, python_c, tool as harness_tool, use  # its own tool() below runs one
from harness.errors import Refused
from harness.measure.session import Session
from test_run_experiment import run_here

REPO = Path(__file__).resolve().parent.parent
CHEATERS = Path(__file__).resolve().parent / "cheaters"
HONEST_COST_S = 0.3  # what the timing cheaters pay per honest call
# TOY_DELAY_S for run_experiment's fp32 baseline: a fast candidate that sleeps 20 ms a call is a
# keeper by far (one of ~1 ms swings several times with a loaded CPU's scheduling, which the keep
# rule rightly calls noise); a longer sleep only adds wall time to every paired experiment.
BASELINE_DELAY_S = 0.1


def cheater(name: str, where: Path | None = None, **config: str) -> Path:
    """The cheater's file; with `config`, a copy in `where` whose source sets those CHEAT_*
    variables itself (with its helper modules beside it): the configuration travels in the source
    the harness hands the worker, so it reaches the cheater whatever environment the worker gets."""
    if not config:
        return CHEATERS / f"{name}.py"
    assert where is not None
    where.mkdir(parents=True, exist_ok=True)
    for helper in CHEATERS.glob("_*.py"):
        shutil.copy2(helper, where / helper.name)
    path = where / f"{name}.py"
    path.write_text(with_config((CHEATERS / f"{name}.py").read_text(), config))
    return path


def with_config(source: str, config: dict[str, str]) -> str:
    """A cheater's source that sets these CHEAT_* variables itself (see cheater)."""
    return f"import os as _os\n_os.environ.update({config!r})\n" + source


BUNDLE = '''"""Several cheaters in one worker (tests/test_cheaters_isolation.py bundle): each one's build in
turn, then on each call each one's forward; the last one's output is the call's."""

import importlib
import os as _os

_os.environ.update({config!r})
_NAMES = {names!r}


def build_decoder(model, example):
    built = [importlib.import_module(n).build_decoder(model, example) for n in _NAMES]

    def forward(x):
        out = None
        for fn, _ in built:
            out = fn(x)
        return out

    return forward, {{n: info for n, (_, info) in zip(_NAMES, built)}}
'''


def bundle(where: Path, names: list[str], **config: str) -> Path:
    """One candidate that runs several cheaters in one worker (a worker's start is most of a
    test's cost), with their helpers beside it and the CHEAT_* variables set in its source."""
    where.mkdir(parents=True, exist_ok=True)
    for path in [*CHEATERS.glob("_*.py"), *(CHEATERS / f"{n}.py" for n in names)]:
        shutil.copy2(path, where / path.name)
    path = where / "bundle.py"
    path.write_text(BUNDLE.format(config=config, names=names))
    return path


def info(f: dict) -> dict:
    """The cheater's own report (build's `info`), where the harness kept it as a dict; the tests
    never depend on it for their verdict, only for saying what the cheater did."""
    return f.get("info") if isinstance(f.get("info"), dict) else {}


def _path(candidate: str | Path) -> Path:
    return candidate if isinstance(candidate, Path) else CHEATERS / f"{candidate}.py"


def measure(candidate: str | Path, **kw: Any) -> dict:
    with Session(_path(candidate), "tiny", "cpu", **kw) as s:
        return s.measure()


# --- processes ------------------------------------------------------------------------------------

def _children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int(d.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children_of(todo.pop())
        out += kids
        todo += kids
    return out


def _kill(pids: list[int]) -> None:
    """SIGKILL each; first give it back a normal scheduling class: a process a cheater made
    SCHED_DEADLINE with ~1 us of runtime per 4 s takes minutes to even die (seen on today's main)."""
    for pid in pids:
        try:
            os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def with_marker(marker: str) -> list[int]:
    """Processes whose command line holds the marker (ones the test's cheater started)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int(d.name) != os.getpid() and marker.encode() in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            pass
    return found


def run_bounded(cmd: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess:
    """Run a harness process with a time limit; on the limit, kill it and everything it started
    (its worker too: that is a session of its own) and raise TimeoutExpired."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        family = _descendants(p.pid)
        _kill([p.pid, *family])
        p.communicate()
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


CHILD = r"""
import json, os, sys
from harness.measure.session import Session
from harness.errors import Refused
path, kw = sys.argv[1], json.loads(sys.argv[2])
def sched():
    return {"policy": os.sched_getscheduler(0), "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "cpus": sorted(os.sched_getaffinity(0))}
before = sched()
with Session(path, "tiny", "cpu", **kw) as s:
    f = s.measure()
f["harness_sched"] = {"before": before, "after": sched()}
print(json.dumps(f, default=str))
"""


def child_session(candidate: str | Path, timeout: float, **kw: Any) -> tuple[subprocess.CompletedProcess, dict | None]:
    """A Session's measure() in a child process (the same code as measure(), in a process the
    cheater may harm): its completed process and its facts (None when it printed none)."""
    r = run_bounded([*python_c(CHILD), str(_path(candidate)), json.dumps(kw)], timeout, cwd=REPO)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return r, (json.loads(lines[-1]) if lines else None)


def died_by_signal(r: subprocess.CompletedProcess) -> str:
    return f"killed by {signal.Signals(-r.returncode).name}" if r.returncode < 0 else ""


# --- workspaces -----------------------------------------------------------------------------------

SLOW_HONEST = '''"""An honest candidate, slower than the baseline: a revert by construction."""


def build_decoder(model, example_input):
    model.delay = 2 * model.delay
    return (lambda x: model(x)), {"dtype": "float32"}
'''


def make_template(folder: Path) -> Path:
    ws = make_toy(folder / "ws")
    slow = folder / "slow_honest.py"
    slow.write_text(SLOW_HONEST)
    # run_experiment's main in this process (no interpreter start): an honest candidate only sets
    # the stage; each test's experiments run as harness processes of their own.
    rc, _, out = run_here(ws, "--desc", "template baseline", "--candidate", str(slow), "--device", "cpu",
                          delay=BASELINE_DELAY_S)
    # its verdict is not this fixture's point: on a busy machine the slower candidate may be inconclusive
    assert rc == 0 and [row["status"] for row in rows(ws)] in (["baseline", "revert"], ["baseline", "inconclusive"]), \
        out[-2000:]
    return ws


@made_once_fixture
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A toy workspace (assets made once) that tests copy when they need one to write in. Its
    first run is already recorded (the fp32 eager baseline, then a slower honest candidate: a
    revert), so each experiment in a copy measures only its cheater against that baseline (the
    baseline's worker and its calls once per run, not once per experiment or xdist worker)."""
    return made_once(tmp_path_factory, "isolation", make_template)


@pytest.fixture
def ws(template: Path, tmp_path: Path) -> Iterator[Path]:
    dest = tmp_path / "ws"
    shutil.copytree(template, dest, symlinks=True)
    with use(dest):
        yield dest


def tool(ws: Path, module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """Harness tool MODULE (harness.cli.verify, ...) with ARGS in the workspace, its harness/, bounded."""
    full = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json"), **(env or {})}
    return run_bounded([*harness_tool(module, ws), *args], timeout, cwd=ws, env=full)


def rows(ws: Path) -> list[dict[str, str]]:
    path = ws / "results.tsv"
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, ln.split("\t"))) for ln in lines[1:] if ln.strip()]


def experiment(ws: Path, candidate: str | Path, desc: str) -> subprocess.CompletedProcess:
    """run_experiment.py on a cheater, with a slow frozen model (the baseline pays BASELINE_DELAY_S
    a call), so that a fast cheater is a keeper and gets profiled and FLOP-counted."""
    return tool(ws, "harness.cli.run_experiment", "--desc", desc, "--candidate", str(_path(candidate)),
                "--device", "cpu", env={"TOY_DELAY_S": str(BASELINE_DELAY_S)})


def no_traceback(r: subprocess.CompletedProcess) -> None:
    both = r.stdout + r.stderr
    assert "Traceback (most recent call last)" not in both, f"the harness raised:\n{both[-3000:]}"


# --- 1, 2: a head start before the clock ---------------------------------------------------------

def test_stalling_the_harness_buys_no_time(at_toy: Path) -> None:
    """stalls_harness: SCHED_IDLE, nice 19 and one CPU for its parent, a busy watcher on that CPU.
    Had the harness been starved between writing an input and starting its clock, the watcher's
    honest cost would fall outside the timed interval."""
    r, f = child_session("stalls_harness", timeout=120)
    assert f is not None, f"the harness died ({died_by_signal(r) or r.returncode}): {r.stderr[-2000:]}"
    assert f["passed"], f["reason"]
    sched = f["harness_sched"]
    assert f["median_s"] >= 0.9 * HONEST_COST_S, \
        f"the honest cost escaped the clock: times {f['times_s']}, the cheater did {f.get('info')}, harness {sched}"
    assert sched["before"] == sched["after"], f"the worker re-scheduled the harness: {sched}; {f.get('info')}"


def test_watching_the_input_buys_no_time(at_toy: Path) -> None:
    """watches_input: a thread starts each call's work when the input buffer changes."""
    f = measure("watches_input")
    assert f["passed"], f["reason"]
    assert info(f).get("found_buffer", True), "the cheater did not find the input buffer: the test proves nothing"
    assert f["median_s"] >= 0.9 * HONEST_COST_S, f"a head start before the clock: {f['times_s']}"


# --- 3: freezing the harness ------------------------------------------------------------------------

def test_the_harness_cannot_be_frozen(at_toy: Path) -> None:
    """freezes_harness: SCHED_DEADLINE with ~1 us of runtime in 4 s (else SCHED_IDLE on a CPU it
    keeps busy) and SIGSTOP, on its parent. The session must end on its own, with a result."""
    try:
        r, f = child_session("freezes_harness", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the harness hung: the worker froze it (no result within 60 s)")
    assert f is not None, f"the harness died ({died_by_signal(r) or r.returncode}): {r.stderr[-2000:]}"
    assert f["passed"], f["reason"]
    assert f["harness_sched"]["before"] == f["harness_sched"]["after"], f"re-scheduled: {f['harness_sched']} {f.get('info')}"


# --- 4: limits on the harness ----------------------------------------------------------------------

@pytest.mark.parametrize("limit", ["FSIZE", "NOFILE"])
def test_prlimit_on_the_harness(ws: Path, tmp_path: Path, limit: str) -> None:
    """prlimits_harness: RLIMIT_FSIZE 1 byte (SIGXFSZ at the first record write) or RLIMIT_NOFILE 3
    on its parent. run_experiment must end normally and write its row and record."""
    r = experiment(ws, cheater("prlimits_harness", tmp_path / "c", CHEAT_RLIMIT=limit), f"prlimit {limit}")
    assert r.returncode in (0, 1), f"run_experiment {died_by_signal(r) or f'exited {r.returncode}'}: {(r.stdout + r.stderr)[-2000:]}"
    no_traceback(r)
    mine = [row for row in rows(ws) if row["desc"] == f"prlimit {limit}"]
    assert len(mine) == 1, f"no row for the candidate: {rows(ws)}"
    assert (ws / "records" / f"{mine[0]['exp']}.json").is_file()


# --- 5: what the project records ------------------------------------------------------------------

def test_records_are_out_of_sight(tmp_path: Path) -> None:
    """reads_records: results.tsv, records/, runs/*.lock ('pid <harness pid>'), .git, ... in the
    goals folder, the repository, the working directory. The worker must see none of them."""
    ws = make_toy(tmp_path / "ws", git=True)
    (ws / "records").mkdir()
    (ws / "records" / "e001.json").write_text(json.dumps({"exp": "e001", "source": "def build_decoder(...)"}))
    (ws / "results.tsv").write_text("exp\tstatus\tmedian_s\ne001\tkeep\t0.123\n")
    (ws / "runs").mkdir(exist_ok=True)
    (ws / "runs" / "run_experiment.lock").write_text(f"pid {os.getpid()}, since now")
    (ws / "PROGRESS.md").write_text("# Progress\n\n## Log\n\n- e001 keep: 0.123 s\n")
    # Through verify.py, a process of its own on this workspace (a harness process that has
    # imported the toy's adapter from another workspace would show the worker that one's folder).
    r = tool(ws, "harness.cli.verify", "--candidate", str(cheater("reads_records", tmp_path / "c", CHEAT_LOOK=str(ws))),
             "--device", "cpu")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"verify printed no facts (exit {r.returncode}): {r.stderr[-1500:]}"
    f = json.loads(lines[-1])
    said = info(f)
    assert f["passed"], f"the worker read the records: {said.get('read')} (locks: {said.get('locks')}); {f['reason']}"


def test_only_the_helpers_beside_a_candidate_are_shown(at_toy: Path, tmp_path: Path) -> None:
    """reads_beside_it: a candidate with helpers beside it, in a folder that also holds other files
    (as /tmp holds a GPU session's copy of the signing key, a home folder its ~/.config), and a .py
    link to a file elsewhere. The worker imports the helper and reads neither."""
    where, elsewhere = tmp_path / "c", tmp_path / "elsewhere"
    where.mkdir()
    elsewhere.mkdir()
    secret, linked = where / "record-key", where / "linked.py"
    (elsewhere / "notes").write_text("not for the worker either")
    linked.symlink_to(elsewhere / "notes")
    candidate = cheater("reads_beside_it", where, CHEAT_BESIDE=os.pathsep.join([str(secret), str(linked)]))
    secret.write_text("not for the worker")
    f = measure(candidate)
    assert f["passed"], f"the worker read beside its candidate: {info(f).get('read')}; {f['reason']}"


def test_a_candidate_in_tmp_keeps_the_workers_tmp(at_toy: Path) -> None:
    """reads_beside_it, in the host's /tmp itself beside a helper of its own (as a plan's variants lie
    there): the folder shown would cover the worker's own /tmp, read-only (a crash at build: session
    36's dry run), and show it the host's /tmp. Every file here has a name of this run's own, made
    with O_EXCL: nothing already in /tmp is overwritten or removed."""
    tag = f"auto_optim_test_{uuid.uuid4().hex[:12]}"
    tmp = Path("/tmp")
    secret, helper, candidate = tmp / f"{tag}.key", tmp / f"{tag}_target.py", tmp / f"{tag}.py"
    source = (CHEATERS / "reads_beside_it.py").read_text().replace("from _target import honest", f"from {tag}_target import honest")
    texts = {secret: "not for the worker", helper: (CHEATERS / "_target.py").read_text(),
             candidate: with_config(source, {"CHEAT_BESIDE": str(secret)})}
    made = []
    try:
        for path, text in texts.items():
            with open(path, "x") as out:  # O_EXCL
                made.append(path)
                out.write(text)
        f = measure(candidate)
    finally:
        for path in made:
            path.unlink(missing_ok=True)
    assert f["passed"], f"{f['reason']}; read: {info(f).get('read')}"


# --- 6: files that cannot be deleted ---------------------------------------------------------------

def _leftovers(marker: str) -> list[Path]:
    found = []
    for top in {Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path(os.environ.get("TMPDIR", "/tmp"))}:
        found += list(top.glob(marker)) + list(top.glob(f"*/{marker}"))
    return sorted(set(found))


def _unmake(paths: list[Path]) -> None:
    for p in paths:
        subprocess.run(["chattr", "-R", "-i", str(p)], capture_output=True)
        subprocess.run(["chattr", "-i", str(p.parent)], capture_output=True)
        shutil.rmtree(p, ignore_errors=True)
        if p.parent.name.startswith("auto-optim-worker-"):
            shutil.rmtree(p.parent, ignore_errors=True)


def test_no_immutable_leftovers(at_toy: Path, tmp_path: Path) -> None:
    """leaves_immutable, twice: the first plants an immutable folder in its scratch, the second
    looks for it (and fails the gate if it finds it). Nothing may survive a session."""
    tag = uuid.uuid4().hex[:12]
    marker = f"cheat-immutable-{tag}"
    planter = cheater("leaves_immutable", tmp_path / "c", CHEAT_MARKER=tag)
    try:
        first = measure(planter)
        left_after_first = _leftovers(marker)
        second = measure(planter)
        left = _leftovers(marker)
    finally:
        _unmake(_leftovers(marker))
    assert first["passed"], first["reason"]
    assert second["passed"], f"the second worker found the first one's files: {info(second).get('found')}"
    assert not left_after_first and not left, \
        f"left on the host: {left_after_first or left}; the cheater planted {info(first).get('planted')}"


# --- 7: processes that outlive the session --------------------------------------------------------

def _free_udp_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _udp_answer(port: int) -> bytes | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.5)
    try:
        s.sendto(b"ping", ("127.0.0.1", port))
        return s.recvfrom(1024)[0]
    except OSError:
        return None
    finally:
        s.close()


def test_no_process_outlives_the_session(at_toy: Path, tmp_path: Path) -> None:
    """survives_session: a chain of 25 processes, each in its own session and each the parent of
    the next, longer than the kill loop; the last serves UDP with a marker."""
    marker = f"auto-optim-chain-{uuid.uuid4().hex[:12]}"
    port = _free_udp_port()
    try:
        f = measure(cheater("survives_session", tmp_path / "c", CHEAT_MARKER=marker, CHEAT_UDP_PORT=str(port)))
        time.sleep(0.5)
        alive, answer = with_marker(marker), _udp_answer(port)
    finally:
        for _ in range(3):  # the chain's links, killed from the top down: clean up after a success
            _kill(with_marker(marker))
            time.sleep(0.2)
    assert f["passed"], f["reason"]
    assert not alive, f"{len(alive)} of the cheater's processes outlived the session (chain up: {info(f).get('chain_up')})"
    assert answer is None, f"a process of the worker's still answers on 127.0.0.1:{port}: {answer!r}"


# --- 8: phoning home without TCP ------------------------------------------------------------------

def test_no_udp_or_abstract_socket_out(at_toy: Path, tmp_path: Path) -> None:
    """phones_home_udp: a UDP datagram to a port the test listens on, and a message on abstract
    unix sockets (stream and datagram) the test listens on. Nothing may arrive."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.2)
    name = f"auto-optim-test-{uuid.uuid4().hex[:12]}"
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream.bind("\0" + name)
    stream.listen()
    stream.settimeout(0.2)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind("\0" + name + "-dgram")
    dgram.settimeout(0.2)
    phone = cheater("phones_home_udp", tmp_path / "c", CHEAT_UDP_PORT=str(udp.getsockname()[1]), CHEAT_ABSTRACT=name)
    got: dict[str, bytes] = {}
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            for label, sock in (("udp", udp), ("unix_dgram", dgram)):
                try:
                    got[label] = sock.recv(1024)
                except OSError:
                    pass
            try:
                conn, _ = stream.accept()
                conn.settimeout(1)
                got["unix_stream"] = conn.recv(1024) or b"(connected)"
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    try:
        f = measure(phone)
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=5)
        for s in (udp, stream, dgram):
            s.close()
    assert f["passed"], f["reason"]
    assert not got, f"the worker reached the test's listeners: {got} (it says {info(f).get('sent')})"


# --- beyond the list: a Unix socket bound at a path on the host -----------------------------------

def test_no_unix_socket_to_the_host(at_toy: Path, tmp_path: Path) -> None:
    """dials_host_socket: a host service listening at a path (as a session bus or a container
    runtime does) must hear nothing from the worker, whose view of that path is read-only."""
    path = Path("/var/tmp") / f"auto-optim-test-{uuid.uuid4().hex[:12]}.sock"  # not under /tmp: the worker has its own
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.2)
    heard: list[bytes] = []

    def listen() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not heard:
            try:
                conn, _ = server.accept()
                heard.append(conn.recv(100) or b"(connected)")
            except OSError:
                pass

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    try:
        f = measure(cheater("dials_host_socket", tmp_path / "c", CHEAT_SOCKET=str(path)))
    finally:
        heard.append(b"") if not heard else None
        thread.join(timeout=2)
        server.close()
        path.unlink(missing_ok=True)
    assert f["passed"] and heard == [b""], f"the worker reached a host unix socket: {heard} {f['reason']}"


# --- 9: the shared output buffer shrunk under the harness -----------------------------------------

@pytest.mark.parametrize("which", ["output", "input"])
def test_truncated_buffer_in_a_session(at_toy: Path, tmp_path: Path, which: str) -> None:
    """truncates_output: the shared buffer ftruncate()d to 0 at the end of build. The harness
    (Session.measure, in a child process here so that a SIGBUS fails the test, not the test run)
    must survive and report a crash or gate failure with a one-line reason."""
    r, f = child_session(cheater("truncates_output", tmp_path / "c", CHEAT_TRUNCATE=which), timeout=120)
    assert r.returncode == 0 and f is not None, \
        f"the harness {died_by_signal(r) or f'exited {r.returncode}'}: {r.stderr[-1500:]}"
    assert not f["passed"] and f["status"] in ("crash", "gate_fail"), f
    assert f["reason"] and "\n" not in f["reason"], f["reason"]


def test_truncated_output_buffer_through_verify(at_toy: Path) -> None:
    r = tool(at_toy, "harness.cli.verify", "--candidate", str(CHEATERS / "truncates_output.py"), "--device", "cpu")
    assert r.returncode == 1, f"verify {died_by_signal(r) or f'exited {r.returncode}'}: {(r.stdout + r.stderr)[-1500:]}"
    no_traceback(r)
    assert re.search(r"^reason: \S", r.stdout, re.M), r.stdout[-1500:]


# --- 10: malformed replies ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["memory_str", "memory_blob", "profile", "flops"])
def test_malformed_replies_are_a_crash_row(ws: Path, tmp_path: Path, kind: str) -> None:
    """malformed_replies: the worker's 'memory', 'profile' or 'flops' reply of the wrong type or
    size. run_experiment must write a crash row with a one-line reason, and no traceback."""
    r = experiment(ws, cheater("malformed_replies", tmp_path / "c", CHEAT_MALFORMED=kind), f"malformed {kind}")
    no_traceback(r)
    assert r.returncode in (0, 1), f"run_experiment {died_by_signal(r) or f'exited {r.returncode}'}: {r.stderr[-1500:]}"
    mine = [row for row in rows(ws) if row["desc"] == f"malformed {kind}"]
    assert len(mine) == 1, f"no row for the candidate: {rows(ws)}; {r.stderr[-1500:]}"
    record = json.loads((ws / "records" / f"{mine[0]['exp']}.json").read_text())
    # A profile and a FLOP count are asked of a keeper only: a row that is not a crash is either a malformed
    # reply accepted or (its verdict says which) a cheater not kept, whose reply was never asked for.
    assert mine[0]["status"] == "crash", f"a malformed {kind} reply was accepted: row {mine[0]['status']}, " \
                                         f"verdict {record.get('verdict', '')[:200]!r}, " \
                                         f"facts {({k: str(v)[:80] for k, v in record.get('facts', {}).items() if k in ('peak_mem_gb', 'executed_flops')})}"
    assert record.get("reason") and "\n" not in record["reason"], record.get("reason")


# --- 11: forged lines in what people read ---------------------------------------------------------

FORGED_ROW = re.compile(r"^\s*(\| fake \| row \||# heading)", re.M)


def forged_lines(text: str) -> list[str]:
    """What a terminal or a markdown reader would show as lines of their own: split at \\r too."""
    return [ln for ln in re.split(r"\r\n|\r|\n", text) if ln.strip() in ("passed: True", "median_s: 0.0001")]


def check_no_forgery(text: str, where: str) -> None:
    assert "\x1b" not in text, f"an ESC byte from the worker reached {where}: {text[max(0, text.index(chr(27)) - 80):][:200]!r}"
    assert not forged_lines(text), f"a forged line in {where}: {forged_lines(text)}"
    rows_ = FORGED_ROW.findall(re.sub(r"\r\n?", "\n", text))  # markdown ends a line at \r too
    assert not rows_, f"forged markdown in {where}: {rows_}"


@pytest.mark.parametrize("how", ["info", "raise", "exit"])
def test_forged_lines_in_verify(at_toy: Path, tmp_path: Path, how: str) -> None:
    """forges_output through verify.py: each variant fails, so no line may say `passed: True`."""
    r = tool(at_toy, "harness.cli.verify", "--candidate", str(cheater("forges_output", tmp_path / "c", CHEAT_FORGE=how)),
             "--device", "cpu")
    assert r.returncode == 1, f"verify exited {r.returncode}: {(r.stdout + r.stderr)[-1500:]}"
    no_traceback(r)
    check_no_forgery(r.stdout, "verify's output")
    check_no_forgery(r.stderr, "verify's stderr")


@pytest.mark.parametrize("how", ["raise", "keeper", "keeper_str", "keeper_profile"])
def test_forged_lines_in_records(ws: Path, tmp_path: Path, how: str) -> None:
    """forges_output through run_experiment.py: its output, results.tsv, leaderboard.md,
    PROGRESS.md and the keeper's profiles/*.md hold no forged line, no ESC, no forged markdown."""
    r = experiment(ws, cheater("forges_output", tmp_path / "c", CHEAT_FORGE=how), f"forged {how}")
    no_traceback(r)
    mine = [row for row in rows(ws) if row["desc"] == f"forged {how}"]
    assert len(mine) == 1, f"no row: {(r.stdout + r.stderr)[-1500:]}"
    reason = json.loads((ws / "records" / f"{mine[0]['exp']}.json").read_text()).get("reason")
    if how == "keeper":  # honest but for its info: kept, profiled (a forged profile reply may be refused)
        assert mine[0]["status"] == "keep", f"the honest keeper variant was not kept: {mine[0]['status']}: {reason}"
    if mine[0]["status"] == "keep":
        assert list((ws / "profiles").glob("*.md")), "no profile written for the keeper"
    check_no_forgery(r.stdout, "run_experiment's output")
    check_no_forgery(r.stderr, "run_experiment's stderr")
    for path in [ws / "results.tsv", ws / "leaderboard.md", ws / "PROGRESS.md", *(ws / "profiles").glob("*.md")]:
        if path.is_file():
            check_no_forgery(path.read_text(), str(path.relative_to(ws)))


# --- 12: the benchmark input rebuilt from a public seed -------------------------------------------

def test_benchmark_input_cannot_be_rebuilt(at_toy: Path) -> None:
    """rebuilds_input: make_input(shape, goals input_seed) at build, answered instantly and
    exactly; every other input pays the honest cost and is degraded within the gate."""
    f = measure("rebuilds_input")
    assert f["passed"], f["reason"]
    checked = f["checked"]
    fastest = min(checked, key=lambda c: c["seconds"])
    assert fastest["seconds"] >= 0.9 * HONEST_COST_S, \
        f"the worker recognised an input ({fastest['input']}, {fastest['seconds']:.4f} s): it rebuilt it from a seed it can read"
    worst = max(c["quality"] for c in checked)  # the toy's gate: lower is better
    assert f["quality"] == worst, f"reported quality {f['quality']} is not the worst of the calls ({worst}): " \
                                  f"{[(c['input'], c['quality']) for c in checked]}"


# --- beyond the list: the floor from the worker's word; the tool from the worker's own process ----

def test_the_workers_figures_stay_claims(ws: Path, tmp_path: Path) -> None:
    """inflates_flops, forges_profile and forges_host in one worker, through run_experiment: during
    the 'flops' request a free 65536^3 matmul on the meta device, which the counter in the worker adds
    to the count; a 'profile' reply forged to say the device was busy through the whole call, all of
    it in convolutions; every call's host figures forged to say it returned at once. The keeper's
    record keeps all three as the candidate's claims (facts["claims"]), never as facts of its own;
    the call's time stays the harness's clock; the floor does not rise above the call; and the stop
    rule, with a plateau behind the row and a floor to judge it by, does not say STOP on those claims."""
    from harness import _common
    from harness.decide import floor

    r = experiment(ws, bundle(tmp_path / "c", ["inflates_flops", "forges_profile", "forges_host"]), "forged figures")
    no_traceback(r)
    mine = [row for row in rows(ws) if row["desc"] == "forged figures"]
    assert len(mine) == 1 and mine[0]["status"] == "keep", f"not a keeper, so not counted: {mine} {r.stderr[-1000:]}"
    rec = json.loads((ws / "records" / f"{mine[0]['exp']}.json").read_text())
    facts = rec["facts"]
    floor_s, median = facts.get("floor_s"), facts["median_s"]
    assert floor_s is None or floor_s <= median, \
        f"the floor {floor_s:.4g} s is above the measured median {median:.4g} s ({facts.get('floor_note')})"
    claims = facts.get("claims") or {}
    assert claims.get("executed_flops", 0) > 2 * 65536 ** 3 and "executed_flops" not in facts, \
        f"the worker's FLOP count is not kept as a claim: {({k: facts.get(k) for k in ('claims', 'executed_flops')})}"
    assert (claims.get("profile") or {}).get("busy_fraction") == 1.0, f"the forged profile is not kept as a claim: {claims}"
    assert claims.get("host") == [[[0.0, 0.0]]] * len(facts["checked"]), f"the forged host figures: {claims.get('host')}"
    assert min(c["seconds"] for c in facts["checked"]) >= 0.02, \
        f"a call timed under the toy's honest 20 ms: {[c['seconds'] for c in facts['checked']]}"  # the harness's clock
    goals = _common.load_goals()
    plateau = [{**mine[0], "exp": f"x{i:03d}", "status": "revert"} for i in range(goals["stop_rule"]["plateau_attempts"])]
    gpu_peak = {"device": "cuda", "peak": {"flops": {"rate": 1e9, "op": "a probe"}, "bytes": {"rate": 1e9, "op": "a copy"}}}
    stop, why, best = floor.verdict_for_rows(rows(ws) + plateau, goals, mine[0]["preset"], mine[0]["gpu"], gpu_peak,
                                             _common.load_adapter(goals), ws / "records")
    assert best == mine[0]["exp"] and not stop, f"the stop rule said STOP on the candidate's claims: {why}"
    assert any("claims 100.0%" in w for w in why), why


def test_the_tool_leaves_no_fingerprint(template: Path, tmp_path: Path) -> None:
    """fingerprints_tool through verify.py and run_experiment.py, same environment: what the worker
    sees of its own process must not say which tool started it."""
    env = {"TOY_DELAY_S": str(BASELINE_DELAY_S)}
    ws = shutil.copytree(template, tmp_path / "ws", symlinks=True)  # one workspace: one goals path
    v = tool(ws, "harness.cli.verify", "--candidate", str(cheater("fingerprints_tool")), "--device", "cpu", env=env)
    seen_v = info(json.loads([ln for ln in v.stdout.splitlines() if ln.startswith("{")][-1])).get("fingerprint")
    e = tool(ws, "harness.cli.run_experiment", "--desc", "fingerprint", "--candidate", str(cheater("fingerprints_tool")),
             "--device", "cpu", "--no-profile", env=env)
    mine = [row for row in rows(ws) if row["desc"] == "fingerprint"]
    assert mine, e.stderr[-1500:]
    seen_e = info(json.loads((ws / "records" / f"{mine[0]['exp']}.json").read_text())["facts"]).get("fingerprint")
    if seen_v is None or seen_e is None:
        pytest.skip("the harness keeps no `info` from the worker: no fingerprint can be reported (nor leak)")
    if not (isinstance(seen_v, dict) and isinstance(seen_e, dict)):  # a harness that keeps info as text
        seen_v, seen_e = {"fingerprint": str(seen_v)}, {"fingerprint": str(seen_e)}
    differ = {k: (seen_v.get(k), seen_e.get(k)) for k in set(seen_v) | set(seen_e) if seen_v.get(k) != seen_e.get(k)}
    assert not differ, f"the worker can tell verify from run_experiment by: {differ}"


# --- the controls: the same paths pass an honest candidate -------------------------------------------

HONEST_FAST = '''"""An honest candidate, faster than the slow baseline (the toy's delay set to 20 ms)."""


def build_decoder(model, example_input):
    model.delay = 0.02  # 5x faster than the slow baseline, its calls sleep-dominated (stable under load)
    return (lambda x: model(x)), {"dtype": "float32"}
'''


def test_controls_pass_an_honest_candidate(ws: Path, tmp_path: Path) -> None:
    """Each check above can pass: an honest candidate through a child session keeps the harness's
    scheduling; through run_experiment it is a keeper whose row, record, profile and output hold no
    forgery, whose floor is below its median, and nothing of it outlives the run."""
    honest = tmp_path / "honest_fast.py"
    honest.write_text(HONEST_FAST)
    r, f = child_session(honest, timeout=120)
    assert f is not None and f["passed"], (r.returncode, r.stderr[-1500:])
    assert f["harness_sched"]["before"] == f["harness_sched"]["after"], f["harness_sched"]
    r = experiment(ws, honest, "honest fast")
    no_traceback(r)
    mine = [row for row in rows(ws) if row["desc"] == "honest fast"]
    assert len(mine) == 1 and mine[0]["status"] == "keep", (mine, r.stdout[-1500:])
    assert list((ws / "profiles").glob("*.md")), "no profile written for the keeper"
    check_no_forgery(r.stdout + r.stderr, "run_experiment's output")
    for path in [ws / "results.tsv", ws / "leaderboard.md", ws / "PROGRESS.md", *(ws / "profiles").glob("*.md")]:
        check_no_forgery(path.read_text(), str(path.relative_to(ws)))
    facts = json.loads((ws / "records" / f"{mine[0]['exp']}.json").read_text())["facts"]
    assert facts.get("floor_s") is None or facts["floor_s"] <= facts["median_s"], facts.get("floor_note")


# --- beyond the list: state carried in kernel objects that are not files --------------------------

def _sysv_and_key(marker: str) -> tuple[int, int]:
    """(the SysV segment id, the user-keyring key serial) the cheater would use for this marker:
    each -1 when absent on this host."""
    import ctypes
    import hashlib

    libc = ctypes.CDLL(None, use_errno=True)
    key = int(hashlib.sha256(marker.encode()).hexdigest()[:7], 16)
    shm = libc.shmget(key, 0, 0)
    serial = libc.syscall(250, 10, ctypes.c_long(-4), b"user", f"auto-optim-cheat-{marker}".encode(), 0)
    return shm, serial


def _remove_sysv_and_key(marker: str) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    shm, serial = _sysv_and_key(marker)
    if shm >= 0:
        libc.shmctl(shm, 0, None)  # IPC_RMID
    if serial > 0:
        libc.syscall(250, 9, ctypes.c_long(serial), ctypes.c_long(-4))  # KEYCTL_UNLINK from @u


def test_no_state_in_ipc_or_keyrings(at_toy: Path, tmp_path: Path) -> None:
    """persists_outside_files, twice: a SysV shared memory segment and a user-keyring key planted
    by the first worker; the second looks for them (and fails the gate if it finds them)."""
    tag = uuid.uuid4().hex[:12]
    planter = cheater("persists_outside_files", tmp_path / "c", CHEAT_MARKER=tag)
    try:
        first = measure(planter)
        second = measure(planter)
        left = _sysv_and_key(tag)
    finally:
        _remove_sysv_and_key(tag)
    assert first["passed"], first["reason"]
    assert second["passed"], f"the second worker found the first one's state: {info(second).get('found')}"
    assert left == (-1, -1) or (left[0] < 0 and left[1] <= 0), \
        f"left on the host: SysV segment {left[0]}, keyring key {left[1]} (the cheater planted {info(first).get('planted')})"


# --- 9: a GPU it was not given ---------------------------------------------------------------------

def test_the_sandbox_shows_only_the_workers_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bwrap command line binds the GPU nodes the view names, the driver's compute nodes, and
    nothing else of the host's GPUs or display, even where the host has them (faked here: CI has
    no GPU, and /dev is listed through a stand-in that names four GPUs and the display nodes)."""
    from harness.sandbox import boundary

    if boundary.bwrap() is None:
        pytest.skip(boundary.NOT_INSTALLED)
    host = [Path(f"/dev/nvidia{k}") for k in range(4)] + [Path("/dev/nvidia-modeset"), Path("/dev/nvidia-caps"),
                                                           Path("/dev/dri")]
    real_glob, real_iterdir = Path.glob, Path.iterdir
    monkeypatch.setattr(Path, "glob", lambda self, pat: iter(host) if self == Path("/dev") else real_glob(self, pat))
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(host) if self == Path("/dev") else real_iterdir(self))
    argv, fds = boundary.wrap(["true"], boundary.Policy(shown=(), gpus=("/dev/nvidia3",)))
    for fd in fds:
        os.close(fd)
    bound = [argv[i + 1] for i, a in enumerate(argv) if a == "--dev-bind-try"]
    assert sorted(bound) == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3", "/dev/nvidiactl"], bound


def test_a_worker_is_given_its_gpus_by_uuid_and_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA devices 0..n-1 of the harness, named to the worker by UUID and shown by node (only
    those nodes are writable under Landlock); a GPU whose node NVML cannot name, or whose node is
    not there, is a refusal, never every GPU shown. Unsandboxed, nothing is asked of NVML."""
    from harness import _common

    from harness.measure import nvml
    from harness.sandbox import worker_policy
    nodes = {0: "/dev/nvidia5", 1: "/dev/nvidia2", 2: "/dev/nvidia7"}
    monkeypatch.setattr(nvml, "device_uuid", lambda k: f"GPU-{k}aaa")
    monkeypatch.setattr(nvml, "device_node", lambda k: nodes.get(k) if k != 3 else None)
    real_exists = os.path.exists
    monkeypatch.setattr(worker_policy.os.path, "exists",
                        lambda p: p in ("/dev/nvidia5", "/dev/nvidia2", "/dev/nvidia0", "/dev/nvidiactl") or real_exists(p))
    assert worker_policy.gpus("cpu", 1) == worker_policy.Gpus()
    two = worker_policy.gpus("cuda", 2)
    assert two.uuids == ["GPU-0aaa", "GPU-1aaa"] and two.nodes == ["/dev/nvidia5", "/dev/nvidia2"], two
    env = worker_policy.environment(_common.load_goals(), "/tmp", two.uuids)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-0aaa,GPU-1aaa"
    written = worker_policy.writable("/tmp", two.nodes)
    assert "/dev/nvidia5" in written and "/dev/nvidia2" in written and "/dev/nvidia0" not in written, written
    with pytest.raises(Refused, match="CUDA device 2 .*/dev/nvidia7"):
        worker_policy.gpus("cuda", 3)  # named, but not in /dev
    assert worker_policy.gpus("cuda", 4, sandboxed=False) == worker_policy.Gpus()  # the harness's view, as it is
    del nodes[1]
    with pytest.raises(Refused, match="CUDA device 1 .*NVML did not answer"):
        worker_policy.gpus("cuda", 2)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs a host of two GPUs or more")
def test_another_gpu_is_out_of_reach(at_toy: Path) -> None:
    """borrows_another_gpu on a host of several GPUs, given one: CUDA lists one GPU in the
    sandbox, and /dev holds that GPU's node alone, so the decode stays where the harness put it."""
    from harness.measure import nvml

    with Session(CHEATERS / "borrows_another_gpu.py", "tiny", "cuda") as s:
        f = s.measure()
    assert f["passed"], f["reason"]
    own = nvml.device_node(0)
    assert info(f)["gpus_seen"] == 1 and info(f)["gpu_nodes"] == [own.removeprefix("/dev/")], info(f)
