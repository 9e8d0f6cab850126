"""A fresh attacker's cheaters (issue 41, item 6) against the evaluator, on the toy target at the
tiny preset: written by someone who did not write the walls, each one a file in tests/cheaters/
whose docstring says what it tries and what stops it (or would).

Defended here (plain tests):
- answers_ahead: replies to a call from its own thread as soon as the input lands (the loop's
  own reply swallowed): honest times, the clock starts before the input is written;
- dumps_core: a crashed child's core stays inside the worker's view (this host's core_pattern
  names a file; the working folder is read-only, /tmp its own);
- floods_stdout: 2^18 lines a call into the harness's reader thread: the harness survives and
  times the calls honestly (beside a rival it slows both alike: its docstring's figures);
- hides_memory_in_sockets: Unix socket buffers are charged to the worker's memory cgroup.

Got through once, closed since (each test failed on main at 1536f8b, checked by running it there):
- persists_in_page_cache: preadv2/pwritev2(RWF_NOWAIT) answer EOPNOTSUPP, fadvise64, readahead and
  madvise(MADV_COLD, MADV_PAGEOUT) do nothing (harness/sandbox/seccomp.py);
- exfiltrates_via_locks, finds_its_rival: flock and fcntl's lock-setting commands do nothing,
  F_GETLK and F_OFD_GETLK are refused (harness/sandbox/seccomp.py);
- exfiltrates_via_profile: the profile runs in a fresh worker on throwaway inputs, its rows cut to
  15 names of 80 characters of a kernel name's alphabet (harness/measure/session.py profile, replies.py);
- reads_host_views: /sys is an allow-list (harness/sandbox/boundary.py SYS_SHOWN);
- forks_without_limit: the pids controller's pids.max (harness/sandbox/cgroup.py; goals.json worker_tasks);
- slows_when_keeper: every worker imports the candidate from /tmp/candidate/<name>, its
  folder shown only where it holds helpers (harness/measure/worker_process.py candidate_path);
- a module planted at the project root (the agent's attack): the worker's interpreter is isolated
  (-I) and of the root imports only the frozen code's names (harness/worker/imports.py FROM_ROOT).

GPU only (skipped here; for an H100): sets_gpu_clocks, copies_through_the_freeze.

The runs that several tests read are made once per test run (conftest.made_once) and their
findings kept as JSON: each test asserts on what the host saw (a byte-identical input, a file,
a count), the cheaters' own `info` only where it is the evidence (what a worker could read).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import torch

from conftest import made_once, made_once_fixture, make_toy, tool, use
from harness.sandbox import cgroup_make
from harness import replies
from harness.measure.session import Session
from test_cheaters_isolation import CHEATERS, bundle, cheater, info

LEAKY = ["persists_in_page_cache", "exfiltrates_via_locks", "exfiltrates_via_profile", "reads_host_views",
         "forks_without_limit"]
COST_S = 0.2       # the honest cost a call of the timing cheaters pays
BUILD_S = 0.8      # persists_in_page_cache's slow build, spared when it finds its state
FORKS = 1500       # more processes than the worker's task bound allows
TASKS = 1000       # that bound (goals.json worker_tasks): the default, 4096, is above FORKS
PIECE = 16         # bytes of a hidden input (4 random floats), found in a row, that count as leaked
CORE_PLACES = (Path("/var/lib/systemd/coredump"), Path("/var/crash"))


def _module(name: str):
    """A cheater's module, for its decoder (imported where goals.json names the toy)."""
    return importlib.import_module(name)


def _hidden(s: Session) -> list[bytes]:
    return [s.bench_x.cpu().numpy().tobytes(), *(p["input"].cpu().numpy().tobytes() for p in s.pool)]


# --- one run of the leaky cheaters, then a second worker that looks for the first one's state -----

def _leaky_runs(folder: Path) -> Path:
    from harness.measure import profile

    ws = make_toy(folder / "ws")
    goals = json.loads((ws / "goals.json").read_text())  # a task bound below FORKS (the default is above it)
    (ws / "goals.json").write_text(json.dumps({**goals, "worker_tasks": TASKS}))
    tag = uuid.uuid4().hex[:12]
    with use(ws):
        config = {"CHEAT_MARKER": tag, "CHEAT_COST_S": str(COST_S), "CHEAT_BUILD_S": str(BUILD_S), "CHEAT_FORKS": str(FORKS),
                  "CHEAT_LEAK_INPUTS": "3", "CHEAT_PROFILE_ROWS": str(replies.TOP_ROWS)}  # the most the harness takes
        with Session(bundle(folder / "c", LEAKY, **config), "tiny", "cpu") as s:
            first = s.measure()
            summary = s.profile(first) if first["passed"] else None
            locks = Path("/proc/locks").read_text()  # while the worker lives
            hidden = _hidden(s)
        markdown = profile.to_markdown(profile.report(summary, first), "fresh") if summary else ""
        from_locks = _module("exfiltrates_via_locks").decode(locks, len(hidden[0]))
        from_profile = _module("exfiltrates_via_profile").decode(markdown)
        profile_bytes = _module("exfiltrates_via_profile").leaked(markdown)
        with Session(cheater("persists_in_page_cache", folder / "c2", **config), "tiny", "cpu") as s:
            second = s.measure()
    found = {
        "first": {k: first.get(k) for k in ("passed", "status", "reason", "build_s", "info", "checked")},
        "second": {k: second.get(k) for k in ("passed", "status", "reason", "build_s", "info", "checked")},
        "hidden_inputs": len(hidden),
        "from_locks": sum(h in from_locks for h in hidden),
        "from_profile": sum(h in from_profile for h in hidden),
        "in_profile": sum(any(h[k:k + PIECE] in profile_bytes for k in range(0, len(h) - PIECE + 1, 4)) for h in hidden),
        "profile_bytes": len(profile_bytes),
    }
    (folder / "found.json").write_text(json.dumps(found, default=str))
    return folder / "found.json"


@made_once_fixture
def leaky(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return json.loads(made_once(tmp_path_factory, "fresh_leaky", _leaky_runs).read_text())


def test_the_leaky_cheaters_ran(leaky: dict) -> None:
    """The control for the tests below: the bundle passed (its outputs are honest), so
    what they find is what a passing candidate could do."""
    assert leaky["first"]["passed"] and leaky["second"]["passed"], (leaky["first"]["reason"], leaky["second"]["reason"])
    assert leaky["hidden_inputs"] >= 9


def test_no_state_carried_in_the_page_cache(leaky: dict) -> None:
    """persists_in_page_cache, twice with one marker: the second worker must find nothing, so it
    pays its whole build and the honest cost of every call."""
    second = leaky["second"]
    said = info(second).get("found") if isinstance(info(second), dict) else None
    fast = [c for c in second["checked"] if c["seconds"] < 0.9 * COST_S]
    assert not said and second["build_s"] >= 0.9 * BUILD_S and not fast, \
        f"the second worker found the first one's state: {info(second)}; build {second['build_s']:.2f} s, " \
        f"{len(fast)} of {len(second['checked'])} calls below the honest cost"


def test_no_hidden_input_leaves_through_locks(leaky: dict) -> None:
    assert leaky["from_locks"] == 0, \
        f"{leaky['from_locks']} of the {leaky['hidden_inputs']} hidden inputs read back from /proc/locks, byte for byte"


def test_no_hidden_input_leaves_through_the_profile(leaky: dict) -> None:
    """Not one piece of PIECE bytes of any hidden input in what the profile's rows carry (a shorter
    list only takes longer: the pool stays the same from one experiment to the next)."""
    assert leaky["in_profile"] == 0, \
        f"pieces of {leaky['in_profile']} of the {leaky['hidden_inputs']} hidden inputs in the profile's markdown " \
        f"({leaky['from_profile']} whole, {leaky['profile_bytes']} bytes carried)"


def test_the_host_is_out_of_view(leaky: dict) -> None:
    said = info(leaky["first"]).get("reads_host_views", {})
    seen = {k: said.get(k) for k in ("host_interfaces", "disks_with_io", "root_only_readable")}
    assert said and not any(seen.values()), f"the worker read the host's: {seen}"


def test_the_workers_processes_are_bounded(leaky: dict) -> None:
    said = info(leaky["first"]).get("forks_without_limit", {})
    assert said.get("refused") and said.get("started", 0) < TASKS, \
        f"the worker started {said.get('started')} processes and none was refused"


# --- a keeper and a candidate, started the way run_experiment starts them ----------------------------

INLINE = '''"""Self-contained cheaters in one file (a keeper's folder holds nothing but its own file)."""

import os as _os
import types as _types

_os.environ.update({config!r})
_MODULES = []
for _name, _source in {sources!r}.items():
    _module = _types.ModuleType(_name)
    _module.__file__ = __file__
    exec(compile(_source, __file__, "exec"), _module.__dict__)
    _MODULES.append((_name, _module))


def build_decoder(model, example):
    built = [(name, module.build_decoder(model, example)) for name, module in _MODULES]

    def forward(x):
        out = None
        for _, (fn, _) in built:
            out = fn(x)
        return out

    return forward, {{name: said for name, (_, said) in built}}
'''


def _inline(names: list[str], **config: str) -> str:
    return INLINE.format(config=config, sources={n: (CHEATERS / f"{n}.py").read_text() for n in names})


def _pair_runs(folder: Path) -> Path:
    from harness.measure.alternate import measure_pair, started

    ws = make_toy(folder / "ws")
    source = _inline(["slows_when_keeper", "finds_its_rival"], CHEAT_MARKER=uuid.uuid4().hex[:12], CHEAT_COST_S="0")
    keeper_dir = Path(tempfile.mkdtemp(prefix="auto-optim-keeper-"))  # harness/cli/keepers.py keeper_file's layout
    try:
        keeper = keeper_dir / "optimize.py"
        keeper.write_text(source)
        (folder / "agent").mkdir()
        candidate = folder / "agent" / "optimize.py"
        candidate.write_text(source)
        (folder / "agent" / "PROGRESS.md").write_text("the agent's folder holds more than its candidate\n")
        with use(ws), started(keeper, candidate, "tiny", "cpu") as (k, c):
            kf, cf = measure_pair(k, c, 3)
    finally:
        shutil.rmtree(keeper_dir, ignore_errors=True)
    found = {"keeper": {"passed": kf["passed"], "reason": kf["reason"], "info": info(kf)},
             "candidate": {"passed": cf["passed"], "reason": cf["reason"], "info": info(cf)}}
    (folder / "found.json").write_text(json.dumps(found, default=str))
    return folder / "found.json"


@made_once_fixture
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return json.loads(made_once(tmp_path_factory, "fresh_pair", _pair_runs).read_text())


def test_the_pair_ran(pair: dict) -> None:
    assert pair["keeper"]["passed"] and pair["candidate"]["passed"], (pair["keeper"]["reason"], pair["candidate"]["reason"])


def test_a_worker_cannot_tell_it_is_the_keeper(pair: dict) -> None:
    roles = (pair["keeper"]["info"]["slows_when_keeper"]["role"], pair["candidate"]["info"]["slows_when_keeper"]["role"])
    assert roles != ("keeper", "candidate"), f"each worker knew its role: keeper says {roles[0]}, candidate says {roles[1]}"


def test_the_two_workers_share_no_channel(pair: dict) -> None:
    heard = pair["candidate"]["info"]["finds_its_rival"]["heard"]
    assert not heard, f"the candidate's worker read its rival's notice: {heard}"


# --- defended ---------------------------------------------------------------------------------------

def _cores(where: list[Path]) -> set[Path]:
    """Core files in those folders (a name with "core" in it)."""
    return {p for place in where if place.is_dir() for p in place.iterdir() if "core" in p.name.lower()}


def test_no_head_start_no_core_out_and_no_stall_from_a_flood(at_toy: Path, tmp_path: Path) -> None:
    """answers_ahead, dumps_core and floods_stdout in one worker: every call takes at least the
    honest cost (the watcher's early reply wins nothing), no core file appears on the host (the
    worker's working folder, where a core_pattern of a file name would put it, and the places
    the usual core helpers keep theirs), and the harness, fed 2^18 lines a call, ends with its
    row."""
    from harness.measure.worker_process import HARNESS

    places = [HARNESS.parent, *CORE_PLACES]
    before = _cores(places)
    path = bundle(tmp_path / "c", ["dumps_core", "floods_stdout", "answers_ahead"], CHEAT_COST_S=str(COST_S),
                  CHEAT_FLOOD_BYTES=str(1 << 18))
    with Session(path, "tiny", "cpu") as s:
        f = s.measure()
    new = _cores(places) - before
    said = info(f)
    assert f["passed"] or f["status"] == "gate_fail", f"{f['status']}: {f['reason']}"
    if f["passed"]:
        fastest = min(c["seconds"] for c in f["checked"])
        assert fastest >= 0.9 * COST_S, f"a call beat its honest cost: {fastest:.4f} s ({said.get('answers_ahead')})"
    assert said["dumps_core"]["crash_in_tmp"].startswith("signal"), f"no child crashed: the test proves nothing {said}"
    assert not new, f"a core left the worker: {sorted(map(str, new))} (core_pattern {said['dumps_core']['core_pattern']!r})"


@pytest.fixture
def bounded(toy: Path, tmp_path: Path):
    """The toy's workspace with a 1 GB worker memory bound (goals.json "worker_memory_gb")."""
    ws = shutil.copytree(toy, tmp_path / "ws", symlinks=True)
    goals = json.loads((ws / "goals.json").read_text())
    (ws / "goals.json").write_text(json.dumps({**goals, "worker_memory_gb": 1.0}))
    with use(ws):
        yield ws


def test_socket_buffers_count_against_the_memory_bound(bounded: Path, tmp_path: Path) -> None:
    """hides_memory_in_sockets: 2 GB in Unix socket buffers with a 1 GB bound. The kernel charges
    them to the worker's cgroup: it dies at its bound and the row says so."""
    group, why = cgroup_make.make(int(1e9))
    if group is not None:
        group.remove()
    if group is None or group.memory is None:
        pytest.skip(f"no memory cgroup here: {why}")
    with Session(cheater("hides_memory_in_sockets", tmp_path / "c", CHEAT_HOG_GB="2"), "tiny", "cpu") as s:
        f = s.measure()
    assert not f["passed"] and f["status"] == "crash", f"the worker held 2 GB in socket buffers: {f['status']} {info(f)}"
    assert "memory bound of 1 GB" in f["reason"], f["reason"]


# --- the agent's side: a module planted at the project root --------------------------------------------

PLANTED = '''"""Planted at the project root after the hook's check: `python -m harness.worker.main`, started from the
project root, imports it in place of the standard pathlib (harness/__init__.py imports pathlib before
it moves the root to the end of sys.path). It runs first in every worker, the keeper's too, before
Landlock and before "ready": here it only leaves a mark the candidate reports, then hands over."""
import os as _os
import sys as _sys

_os.environ["AUTO_OPTIM_PLANTED"] = f"pid {_os.getpid()}, argv {_sys.argv[1:4]}"
_here = _os.path.dirname(_os.path.abspath(__file__))
_saved = list(_sys.path)
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
del _sys.modules[__name__]
import pathlib as _real  # noqa: E402

_sys.path[:] = _saved
_sys.modules[__name__] = _real
globals().update(_real.__dict__)
'''
# torch tries `import opt_einsum` when it is imported (torch.backends.opt_einsum) and goes on
# without it where it is not installed: a module of that name at the project root ran in every
# worker, after Landlock but before the candidate (the keeper's too), while the root was on sys.path.
PLANTED_OPTIONAL = '''"""Planted at the project root under the name of a module torch tries and may not find."""
import os as _os

_os.environ["AUTO_OPTIM_PLANTED"] = f"opt_einsum, pid {_os.getpid()}"
raise ImportError("not really opt_einsum")
'''
REPORTS = '''import os


def build_decoder(model, example):
    return (lambda x: model(x)), {"planted": os.environ.get("AUTO_OPTIM_PLANTED", "no")}
'''


def test_a_module_planted_at_the_root_does_not_run_in_the_worker(tmp_path: Path) -> None:
    """The agent's attack, not a candidate's: the hook (agent/hooks/guard_frozen.py) refuses a
    harness command while the root holds a module that git does not track, but only when the
    command starts; a sandboxed shell of the agent's may write one a moment later. Through
    verify.py on a workspace with its own harness/ (its worker's working folder is the workspace)."""
    ws = make_toy(tmp_path / "ws", copy_harness=True)
    (ws / "pathlib.py").write_text(PLANTED)
    (ws / "opt_einsum.py").write_text(PLANTED_OPTIONAL)
    (ws / "reports.py").write_text(REPORTS)
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json")}
    r = subprocess.run([*tool("harness.cli.verify", ws), "--candidate", str(ws / "reports.py"),
                        "--device", "cpu"], cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"verify printed no facts (exit {r.returncode}): {r.stderr[-1500:]}"
    said = json.loads(lines[-1]).get("info") or {}
    assert said.get("planted") == "no", f"the planted module ran in the worker: {said.get('planted')}"


# --- GPU only ---------------------------------------------------------------------------------------

gpu_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (NVML, copy engines)")


@gpu_only
def test_the_gpus_state_is_out_of_reach(tmp_path: Path, at_toy: Path) -> None:
    """sets_gpu_clocks: every NVML setter (locked clocks, application clocks, power limit) is
    refused to the worker; what it could read of the GPU's other processes is reported."""
    with Session(cheater("sets_gpu_clocks", tmp_path / "c", CHEAT_X="1"), "tiny", "cuda") as s:
        f = s.measure()
    said = info(f)
    assert f["passed"], f["reason"]
    assert said.get("handle") == 0, f"NVML did not open the GPU in the worker: the test proves nothing ({said})"
    done = {k: said[k] for k in ("set_locked_clocks", "set_application_clocks", "set_power_limit") if said.get(k) == 0}
    assert not done, f"the worker changed the GPU's state (then reset it): {done}; it saw processes {said.get('processes')}"


@gpu_only
def test_cuda_and_a_compile_work_behind_the_walls(at_toy: Path, tmp_path: Path) -> None:
    """On a GPU, the walls of issue 41 item 6 left what CUDA, NVML and a compile need: a decode
    on CUDA with /sys cut to its allow-list (and the host's interfaces, disks and firmware out of
    view: reads_host_views), and a torch.compile'd candidate (inductor, Triton) whose file locks
    do nothing."""
    with Session(cheater("reads_host_views", tmp_path / "c", CHEAT_X="1"), "tiny", "cuda") as s:
        f = s.measure()
    said = {k: info(f).get(k) for k in ("host_interfaces", "disks_with_io", "root_only_readable")}
    assert f["passed"], f["reason"]
    assert not any(said.values()), f"the worker read the host's: {said}"
    with Session(Path(__file__).resolve().parent / "candidates" / "compiled.py", "tiny", "cuda") as s:
        f = s.measure()
    assert f["passed"] and info(f).get("compiled"), f"{f['status']}: {f['reason']}"


HONEST_GPU = '''"""An honest keeper for copies_through_the_freeze: the same device-memory traffic, no copies after."""
import os
import torch


def build_decoder(model, example):
    work = int(float(os.environ.get("CHEAT_WORK_GB", "2")) * (1 << 30)) // 2
    a = torch.empty(work, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)

    def forward(x):
        b.copy_(a)
        return model(x)

    return forward, {}
'''


@gpu_only
def test_copies_through_the_freeze_do_not_slow_the_rival(at_toy: Path, tmp_path: Path) -> None:
    """copies_through_the_freeze beside an honest keeper, and an honest twin beside the same
    keeper: the keeper's median beside the cheater must not exceed its median beside the twin by
    more than the noise threshold (else the cheater's copies ran into the keeper's calls, and the
    candidate would be judged faster than it is)."""
    from harness import _common
    from harness.measure.alternate import measure_pair, started

    keeper = tmp_path / "keeper.py"
    keeper.write_text(HONEST_GPU)
    twin = tmp_path / "twin.py"
    twin.write_text(HONEST_GPU + "# the twin\n")
    medians = {}
    for name, candidate in (("cheater", cheater("copies_through_the_freeze", tmp_path / "c", CHEAT_COPY_S="0.5")),
                            ("twin", twin)):
        with started(keeper, candidate, "tiny", "cuda") as (k, c):
            kf, cf = measure_pair(k, c, 6)
        assert kf["passed"] and (cf["passed"] or cf["status"] == "gate_fail"), (kf["reason"], cf["reason"])
        if not cf["passed"]:
            return  # the harness caught the copies (a busy GPU after "done"): defended
        medians[name] = kf["median_s"]
    slower = medians["cheater"] / medians["twin"] - 1
    assert slower <= _common.load_goals().noise, \
        f"the keeper ran {slower:.1%} slower beside the cheater than beside an honest twin ({medians})"
