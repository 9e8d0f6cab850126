"""Shared fixtures: throwaway workspaces with tiny assets, so no test touches the real assets/,
results.tsv or optimize.py.

`toy`: the toy target (tests/toy_target: a conv + MLP with a max-abs gate), its tiny input, its
strict-fp32 reference and pool, harness/ linked in. Cheap: most harness tests run on it.
`workspace`: the same for the Wan 2.2 VAE (goals.json, optimize.py, model/ and harness/ linked),
for the tests that need the full-width model (the gate's calibration). `narrow_workspace`: the
same on the VAE's architecture at narrow widths (tests/narrow_vae), for the tests whose point does
not depend on the channel counts (optimize.py's logic, the CLIs). Each made once per session;
`at_toy`, `at_workspace` and `at_narrow_workspace` point AUTO_OPTIM_GOALS at them for one test.

Memory: the full model's weights file is memory-mapped (model/weights.py caches the synthetic
weights), so loading it costs nothing, but every process that runs it holds its 2.2-2.8 GB of
weights resident. So `vae` lives for one test, not the session, and no test builds optimize.py's
decoder on it (its CPU path copies every conv weight: 5 GB in one process). Under pytest-xdist
(README: `-n 2`), a test that uses the full-width model (the fixtures in FULL_WIDTH), or is marked
`alone`, runs with no other test beside it (pytest_runtest_protocol below), and those tests start
first (pytest_collection_modifyitems). This file imports torch only when a fixture needs it, so
xdist's controlling process (which loads it too) stays small.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder
TOY = Path(__file__).resolve().parent / "toy_target"
NARROW = Path(__file__).resolve().parent / "narrow_vae"
# The harness comes from the installed package (pip install -e .), never from the project root on sys.path:
# `python -m pytest` puts the working folder first, and harness/__init__.py refuses to be imported so.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO]
# The tests' helper folders, importable by name in every test (the only other sys.path edit: tests/test_layout.py):
# the Claude Code stand-ins (claude_stub/) and the attacks' shared pieces (cheaters/: _keys, _reach, _target).
sys.path += [str(Path(__file__).resolve().parent / "claude_stub"), str(Path(__file__).resolve().parent / "cheaters")]
GOALS_ENV = "AUTO_OPTIM_GOALS"  # harness/_common.py's GOALS_ENV, without importing torch here
from harness import target as _target  # noqa: E402 - stdlib only: no torch yet
from harness.start import FREEZE_AT_EXIT  # noqa: E402 - stdlib only

_target.use(VAE)  # `import model`, `from integrations import ...` in the tests: the worked example's
# The record-signing key (harness/ledger/signing.py) of this test run: never the person's own.
os.environ["AUTO_OPTIM_KEY_DIR"] = tempfile.mkdtemp(prefix="auto-optim-test-key-")
# torch's OpenMP threads sleep when they run out of work instead of spinning for it first (GNU
# OpenMP's default): the suite runs two pytest workers (and their harness processes and sandboxed
# workers) on two cores, where a spinning thread burns a core another process was waiting for.
# Set before any process of the run imports torch; every process started from here (the workers
# too: harness/measure/worker_process.py passes OMP_*) inherits it. Set it yourself to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One thread a process: the two pytest workers and the processes they start already keep both
# cores busy, and a second thread in each only adds synchronization. Measured on session 33's
# 2-core VM, the whole suite: 983 CPU s with torch's default of 2 threads, 851-862 with 1 (-12%).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The test repositories' commits (the tests' own and run_experiment's) need an author: on a fresh
# HOME with no git config, `git commit` refuses ("Author identity unknown"). The variables beat
# any config, and every process started from here inherits them.
for _var, _value in (("GIT_AUTHOR_NAME", "auto-optim tests"), ("GIT_AUTHOR_EMAIL", "tests@auto-optim.invalid"),
                     ("GIT_COMMITTER_NAME", "auto-optim tests"), ("GIT_COMMITTER_EMAIL", "tests@auto-optim.invalid")):
    os.environ[_var] = _value
# Triton's kernels run on CPU tensors by its interpreter (TRITON_INTERPRET=1), read when triton is imported:
# so in a child process of their own, and only where triton is installed.
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed (pip install triton)")


def run_interpreted(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python ARGS` in the project root with TRITON_INTERPRET=1, its output captured."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


# The fixtures that hold (or make a process hold) the full-width VAE's weights: 2.2-2.8 GB.
FULL_WIDTH = {"vae", "workspace"}


# Modules started early, longest first (their tests' seconds on 2 cores, issue 15), so that
# under pytest-xdist no long test is left running on one worker while the other has nothing to
# do. The modules of many short tests (the cheaters, ...) come after them and fill the gaps.
# test_wave (big) comes well after test_llm_harness (big), so that it rarely waits for it; and
# test_llm_harness after test_run_experiment's and test_claude_code_e2e's: the first worker done
# with test_hooks would otherwise take it while test_calibration (alone, ~50 s) still holds the
# lock, and wait with nothing to do (29 s of an idle core in a session-34 run; after the move, 11 s
# between tests in all, both workers).
# test_fast_path.py first: its two Triton-interpreter tests are the suite's longest single tests
# (one CPU-bound process each, small in memory): started first, so that neither is left running
# at the end with the other core idle.
LONG_MODULES = ("test_fast_path.py", "test_run_experiment.py", "test_claude_code_e2e.py", "test_llm_harness.py",
                "test_bench_profile.py", "test_wave.py", "test_new_target.py", "test_retarget.py", "test_agent_dry_run.py",
                "test_verify.py", "test_cheaters.py")
# Tests that start no process with torch in it and hold little (the hooks run as small Python
# processes of the standard library): they take no lock, so they run beside an `alone` test too,
# and they start right after those.
LIGHT_MODULES = ("test_hooks.py",)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "alone: under pytest-xdist, started first, and never beside another `alone` "
                            "or `big` test (its processes together hold over 2 GB; see pytest_runtest_protocol)")
    config.addinivalue_line("markers", "big: under pytest-xdist, never beside another `big` or `alone` test "
                            "(its processes hold 1.5-2 GB; a common test beside it is no trouble)")
    if getattr(config.option, "maxschedchunk", "absent") is None:
        # xdist's load scheduling hands each worker a quarter of its share at once (21 tests here),
        # which would put every long test, sorted first, on one worker: hand them out one at a time.
        config.option.maxschedchunk = 1


def runs_alone(item: pytest.Item) -> bool:
    return not FULL_WIDTH.isdisjoint(item.fixturenames) or item.get_closest_marker("alone") is not None


def module_name(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0].rsplit("/", 1)[-1]


def runs_light(item: pytest.Item) -> bool:
    return module_name(item) in LIGHT_MODULES and not runs_alone(item)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order tests start in (each module's own order kept, but for the later users of a
    made_once_fixture: users_after_the_maker): those that run alone first, while
    the pytest processes beside them are still small (each grows as its tests import diffusers,
    transformers, ...), each beside a test of LONG_MODULES; then LIGHT_MODULES, then the rest of
    LONG_MODULES, then the rest."""
    def rank(item: pytest.Item) -> int:
        if runs_alone(item):
            return 0
        if runs_light(item):
            return 1
        name = module_name(item)
        return 2 + LONG_MODULES.index(name) if name in LONG_MODULES else 2 + len(LONG_MODULES)

    items[:] = users_after_the_maker(items)
    items.sort(key=rank)
    # Each `alone` test followed by a long common one: the worker beside it takes that one, not the
    # next `alone` test, which would only wait for the lock (pytest_runtest_protocol).
    alone = [i for i in items if rank(i) == 0]
    light = [i for i in items if rank(i) == 1]
    common = [i for i in items if rank(i) > 1]
    items[:] = [i for pair in zip(alone, common) for i in pair] + alone[len(common):] + light + common[len(alone):]


def users_after_the_maker(items: list[pytest.Item]) -> list[pytest.Item]:
    """Each module's tests in their order, except that a test needing a made_once_fixture that an
    earlier test of its module already needs goes after the module's other tests."""
    modules: dict[str, tuple[list[pytest.Item], list[pytest.Item]]] = {}
    needed: dict[str, set[str]] = {}
    for item in items:
        name = module_name(item)
        first, later = modules.setdefault(name, ([], []))
        wants = {f for f in item.fixturenames if (name, f) in MADE_ONCE_FIXTURES}
        seen = needed.setdefault(name, set())
        (later if wants and wants <= seen else first).append(item)
        seen |= wants
    return [item for first, later in modules.values() for item in first + later]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under pytest-xdist, a test that uses the full-width model (or is marked `alone`, 2.2-4 GB)
    and one marked `big` (1.5-2 GB) never run beside another of either kind: one lock, held
    exclusively over the whole protocol (setup, call, teardown). A common test (at most ~1.5 GB)
    may run beside any, so the other core is never left idle while one runs: the suite peaks at
    one such test, one common test and the pytest processes (about 7 GB; session 21 measured it).
    The lock file lives in the run's temporary folder (run_folder)."""
    if "PYTEST_XDIST_WORKER" not in os.environ or not (runs_alone(item) or item.get_closest_marker("big")):
        yield
        return
    with open(run_folder(item.config._tmp_path_factory) / "big.lock", "a+") as big:
        fcntl.flock(big, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temporary folder: under pytest-xdist the one every worker of the run shares (the
    parent of each worker's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


# (test module, fixture) of the module fixtures whose workspace made_once makes once for the run.
MADE_ONCE_FIXTURES: set[tuple[str, str]] = set()


def made_once_fixture(fn: Callable) -> Any:
    """A module fixture that returns made_once's workspace: as pytest.fixture(scope="module"), and
    registered so that (pytest_collection_modifyitems) the first of its module's tests that takes it
    as an argument keeps its place and the others go after the module's other tests: under xdist
    the second worker would otherwise wait on the lock while the first makes the workspace (11 s of
    an idle core for test_cheaters_fresh.py's leaky cheaters, session 25). A test that asks for it
    with request.getfixturevalue is not seen."""
    MADE_ONCE_FIXTURES.add((fn.__module__.rsplit(".", 1)[-1] + ".py", fn.__name__))
    return pytest.fixture(scope="module")(fn)


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]) -> Path:
    """`make(folder)` once for the whole run, for a workspace that tests only copy or read: under
    pytest-xdist a module's tests run on both workers, where a module-scoped fixture would be made
    twice (a first run's baseline: seconds of CPU and of sleeping toy calls). The first worker to
    ask makes it in the run's shared temporary folder while the other waits on a lock."""
    shared = run_folder(tmp_path_factory)
    done = shared / f"{name}.made"
    with open(shared / f"{name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            folder = shared / name
            shutil.rmtree(folder, ignore_errors=True)  # a failed attempt's remains
            folder.mkdir()
            done.write_text(str(make(folder)))
    return Path(done.read_text())


@contextlib.contextmanager
def use(ws: Path) -> Iterator[Path]:
    """Point the harness at a workspace's goals.json for the duration."""
    saved = os.environ.get(GOALS_ENV)
    os.environ[GOALS_ENV] = str(ws / "goals.json")
    try:
        yield ws
    finally:
        if saved is None:
            os.environ.pop(GOALS_ENV, None)
        else:
            os.environ[GOALS_ENV] = saved


def rows_of(*rows: dict) -> list:
    """Rows as the harness reads them (harness/ledger/rows.py Row): every column, each value its cell's text."""
    from harness.ledger.rows import COLUMNS, Row, cell

    return [Row({c: cell(r.get(c)) for c in COLUMNS}) for r in rows]


def add_record(folder: Path, row: dict) -> list:
    """Record an experiment that only a row says (the store's record made from it: record_from_row),
    in folder/records, and write folder/results.tsv from the store; its rows."""
    from harness.ledger import results
    from harness.ledger.record import record_from_row
    from harness.ledger.store import Store

    store = Store(folder / "records")
    store.write(record_from_row(rows_of(row)[0], migrated={"from": "a test's row"}))
    return results.write(store, folder / "results.tsv")


# The machine's peak probe (assets/peak-*.json) per adapter, as this process first made it: the
# probe times a matmul, a copy and the adapter's own kernels (about a CPU second), and the machine
# is the same for every workspace of the run. test_floor.py makes and checks probes of its own.
_PEAKS: dict[str, dict[str, bytes]] = {}


# What python_c's child runs first: the harness package from the folder its first argument names, by location;
# before it, a harness tool's skip of the final collections at exit (harness/start.py).
_PACKAGE_FROM = (FREEZE_AT_EXIT
                 + "import importlib.util as _u, sys as _s; _f = _s.argv.pop(1); _p = _u.spec_from_file_location("
                 "'harness', _f + '/__init__.py', submodule_search_locations=[_f]); _s.modules['harness'] = "
                 "_u.module_from_spec(_p); _p.loader.exec_module(_s.modules['harness'])\n")


def python_c(code: str, ws: Path | None = None) -> list[str]:
    """`python -c CODE` (its arguments to follow) with the harness package from ws/harness, else this
    checkout's, by location: -P keeps the working folder (a project root) off sys.path."""
    return [sys.executable, "-P", "-c", _PACKAGE_FROM + code, str((ws or REPO) / "harness")]


def tool(module: str, ws: Path | None = None) -> list[str]:
    """The command line that starts a harness tool (harness.cli.verify, ...) in a child process, its
    arguments to follow: the package in ws/harness (a workspace's copy or link), else this checkout's,
    by its folder (harness/start.py), the project root never on sys.path."""
    from harness import start

    return start.command(module, harness=(ws / "harness") if ws else start.HARNESS)


def make_assets(ws: Path) -> None:
    """The tiny seeded input, its reference, the pool and the machine's peak probe (what prepare.py
    makes), with the harness's own functions in this process (a fresh interpreter would cost an
    import of torch; the model they load is freed when they return, its weights file unmapped).
    The probe is made once per adapter and process, then copied."""
    from harness import _common as C
    from harness.decide import floor
    from harness.target import assets, make_latent, make_reference

    assert C.GOALS_ENV == GOALS_ENV  # else the assets below would be made for the real goals.json
    with use(ws):
        make_latent.run("tiny", mode="seeded", device="cpu")
        make_reference.run("tiny", device="cpu")
        goals = C.load_goals()
        made = _PEAKS.get(goals["adapter"])
        if made:
            for name, data in made.items():
                (assets.assets_dir() / name).write_bytes(data)
        else:
            floor.ensure_peak("cpu", C.load_adapter(goals))
            _PEAKS[goals["adapter"]] = {p.name: p.read_bytes() for p in assets.assets_dir().glob("peak-*.json")}


def make_toy(dest: Path, copy_harness: bool = False, git: bool = False) -> Path:
    """A copy of the toy target with tiny assets; harness/ and the adapter package toymodel/ linked
    (harness/ copied, for tests that let a candidate write into it unsandboxed); a git repository
    when asked. Every toy workspace's adapter is then the same file, so a test may run the harness
    in this process on several of them (Python imports toymodel.target once per process)."""
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__", "assets", "toymodel"))
    (dest / "toymodel").symlink_to(TOY / "toymodel", target_is_directory=True)
    if copy_harness:
        shutil.copytree(REPO / "harness", dest / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        (dest / "harness").symlink_to(REPO / "harness", target_is_directory=True)
    (dest / ".gitignore").write_text("__pycache__/\nruns/\nassets/\n")
    make_assets(dest)
    if git:
        for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
            subprocess.run(cmd, cwd=dest, check=True)
    return dest


@pytest.fixture(scope="session")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_toy(tmp_path_factory.mktemp("toy") / "ws")


@pytest.fixture
def at_toy(toy: Path) -> Iterator[Path]:
    with use(toy):
        yield toy


@pytest.fixture
def vae():
    """The pristine frozen full-width VAE on CPU, for one test: loading it is a memory map of the
    synthetic-weights cache (a tenth of a second); what the test touches stays resident until it
    ends (the decoder 2.2 GB, the encoder 0.6 GB)."""
    from harness import _common as C

    with use(VAE):
        return C.load_adapter(C.load_goals()).load_model("cpu")


@pytest.fixture(scope="session")
def narrow_vae():
    """The VAE's architecture at narrow widths (tests/narrow_vae), seeded weights, shared."""
    from narrow_vae.target import load_model

    return load_model("cpu")


def make_vae_workspace(ws: Path, goals: dict, copy_code: bool = False) -> Path:
    """goals.json, optimize.py, model/, integrations/ (the split decode goals.json freezes) and
    harness/ linked (copied with copy_code: see `workspace`)."""
    ws.mkdir(parents=True, exist_ok=True)
    if goals.get("adapter", "model.target").split(".")[0] != "model":  # an adapter that runs model/: frozen code
        goals = goals | {"frozen": [*goals.get("frozen", []), "model"]}
    (ws / "goals.json").write_text(json.dumps(goals, indent=1))
    shutil.copy2(VAE / "optimize.py", ws / "optimize.py")
    for name in ("model", "integrations", "harness"):
        source = REPO / name if name == "harness" else VAE / name
        if copy_code:
            shutil.copytree(source, ws / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (ws / name).symlink_to(source, target_is_directory=True)
    return ws


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full-width VAE. Its pool holds the one fresh (strict-fp32) input test_calibration's
    checks use (goals.json's 8 would cost seven more full-width decodes that no test here reads)."""
    goals = json.loads((VAE / "goals.json").read_text())
    goals["pool"] = {**goals["pool"], "size": 1}
    ws = make_vae_workspace(tmp_path_factory.mktemp("workspace"), goals, copy_code=True)
    make_assets(ws)  # in this process: this checkout's model and its synthetic-weights cache
    # The weights cache where a worker started from this workspace looks for it: its harness/ and
    # model/ are copies, so a harness process run in the workspace starts its worker there, whose
    # model reads ws/assets (in its view). Linked, not copied, where the file system allows: 2.8 GB.
    # (A worker of this checkout's harness sees the workspace's assets/ but not the checkout's, and
    # would draw the 2.8 GB of seeded weights again: ~15 CPU s and 2.8 GB per worker.)
    from model.weights import synthetic_cache

    cache = synthetic_cache()  # ws's own where this process imported model/ from ws first (test_verify.py alone)
    if cache.is_file() and not (ws / "assets" / cache.name).exists():
        try:
            os.link(cache, ws / "assets" / cache.name)
        except OSError:
            shutil.copyfile(cache, ws / "assets" / cache.name)
    return ws


@pytest.fixture(scope="session")
def narrow_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """goals.json with the adapter narrow_vae.target (linked in): the real gate, presets and pool."""
    goals = json.loads((VAE / "goals.json").read_text())
    ws = make_vae_workspace(tmp_path_factory.mktemp("narrow_workspace"), goals | {"adapter": "narrow_vae.target"})
    (ws / "narrow_vae").symlink_to(NARROW, target_is_directory=True)
    make_assets(ws)
    return ws


@pytest.fixture
def at_workspace(workspace: Path) -> Iterator[Path]:
    with use(workspace):
        yield workspace


@pytest.fixture
def at_narrow_workspace(narrow_workspace: Path) -> Iterator[Path]:
    with use(narrow_workspace):
        yield narrow_workspace
