"""Every cheater in tests/cheaters/ against the evaluator, on the toy target (each one runs in its
own sandboxed worker, like any candidate). Each test says what the cheat would have gained and
checks that it did not: a rejected output, a crash on a forbidden act, or an honest time.

The cheaters are written against the target's adapter, so the same files run on the VAE.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from harness.measure.session import Session
from conftest import tool

CHEATERS = Path(__file__).resolve().parent / "cheaters"
HONEST_COST_S = 0.3  # what the timing cheaters sleep per honest call


def measure(name: str, **kw) -> dict:
    with Session(CHEATERS / f"{name}.py", "tiny", "cpu", **kw) as s:
        return s.measure()


@pytest.mark.parametrize("name", ["zeros", "nan", "drift", "wrong_shape", "wrong_dtype", "mutates_input",
                                  "ignores_input", "caches_first", "walks_frames", "detects_phase",
                                  "special_case_patch", "early_done"])
def test_rejected_by_the_gate(at_toy: Path, name: str) -> None:
    f = measure(name)
    assert not f["passed"] and f["status"] == "gate_fail", f"{name}: {f['status']} {f['reason']}"
    assert f["reason"] and "\n" not in f["reason"]


@pytest.mark.parametrize("name, why", [("reads_reference", "FileNotFoundError"), ("reads_pool", "FileNotFoundError"),
                                       ("copies_reference_with_cp", "CalledProcessError"),
                                       ("rewrites_harness", "Read-only file system"),
                                       ("out_of_memory", "raised")])
def test_forbidden_acts_crash(at_toy: Path, name: str, why: str) -> None:
    f = measure(name)
    assert not f["passed"] and f["status"] == "crash" and why in f["reason"], f


@pytest.mark.parametrize("name", ["caches_by_content", "patches_clock", "keeps_working"])
def test_timing_cheats_get_the_honest_time(at_toy: Path, name: str) -> None:
    """Each would look far faster than HONEST_COST_S under a harness that repeated inputs, read
    the candidate's clocks, or stopped the clock before the next call could start."""
    f = measure(name)
    assert f["passed"], f["reason"]
    assert f["median_s"] >= 0.9 * HONEST_COST_S, f["times_s"]


def test_cannot_tell_which_tool_runs_it(at_toy: Path) -> None:
    """Through verify.py itself: were the command lines visible, this cheater would pass."""
    r = subprocess.run([*tool("harness.cli.verify", at_toy), "--candidate", str(CHEATERS / "detects_tool.py"),
                        "--device", "cpu"], cwd=at_toy, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "reason: " in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


def test_no_cache_survives_the_run(at_toy: Path, tmp_path: Path) -> None:
    before = {p: set(p.glob("cheat-*")) for p in (CHEATERS, Path.home(), Path("/tmp"), Path("/var/tmp"))}
    f = measure("persists_cache")
    assert f["passed"], f["reason"]
    for place, old in before.items():
        assert set(place.glob("cheat-*")) == old, f"the worker wrote into {place}"


def test_no_warm_up_carries_over(at_toy: Path) -> None:
    """The keep rule rewards a shorter warm-up (goals.json warmup_gain): a cache kept from one run
    to the next would buy it. Both runs of this cheater must pay its whole slow build."""
    places = (CHEATERS, Path.home(), Path("/tmp"), Path("/var/tmp"))
    before = {p: (p / "cheat-warm-marker").exists() for p in places}
    builds = [measure("warms_up_once")["build_s"] for _ in range(2)]
    assert min(builds) >= 0.9, builds
    assert {p: (p / "cheat-warm-marker").exists() for p in places} == before, "the worker wrote outside its scratch"


def test_the_harness_is_out_of_reach(at_toy: Path) -> None:
    """Its /proc entries, memory and files: the cheater would return garbage if it found any."""
    f = measure("escapes_via_proc")
    assert f["passed"], f"the worker reached the harness: {f['reason']} {f.get('info')}"


def test_no_network(at_toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[bool] = []

    def accept_one() -> None:
        try:
            accepted.append(bool(server.accept()))
        except OSError:  # the socket closed under it at the test's end: nobody called
            pass

    threading.Thread(target=accept_one, daemon=True).start()
    monkeypatch.setenv("CHEAT_PORT", str(server.getsockname()[1]))
    try:
        f = measure("phones_home")
    finally:
        server.close()
    assert f["passed"] and not accepted, f"the worker reached a local server: {f['reason']}"


def test_no_secret_in_its_environment(at_toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-real-one")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-not-a-real-one")
    f = measure("reads_environment")
    assert f["passed"], f"the worker saw secrets in its environment: {f.get('info')}"


def test_cannot_signal_the_harness(at_toy: Path) -> None:
    f = measure("signals_harness")
    assert f["passed"], f"a signal reached the harness: {f['reason']}"


def alive(marker: str) -> bool:
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and marker.encode() in (d / "cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


def test_everything_it_started_is_killed(at_toy: Path) -> None:
    f = measure("spawns_daemon")
    assert f["passed"], f["reason"]
    assert not alive("auto-optim-daemon-marker"), "the daemon outlived the session"


def test_without_the_sandbox_the_tools_refuse(at_toy: Path) -> None:
    """No bubblewrap on the PATH: verify refuses in one line (exit 2) and names the way out, a
    person's --unsandboxed; it does not run the candidate unconfined."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # python, and no bwrap
    r = subprocess.run([*tool("harness.cli.verify", at_toy), "--device", "cpu"], cwd=at_toy, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "bubblewrap is not installed" in r.stderr and "--unsandboxed" in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_hang_is_a_timeout(at_toy: Path) -> None:
    f = measure("hangs", timeout=3)
    assert f["status"] == "timeout" and "3 s" in f["reason"], f


def test_exit_is_a_crash(at_toy: Path) -> None:
    f = measure("exits")
    assert f["status"] == "crash" and "exited with code 3" in f["reason"], f


def test_an_honest_candidate_passes_in_the_same_setup(at_toy: Path) -> None:
    """The control: the toy's own optimize.py, through the same path, passes."""
    with Session(None, "tiny", "cpu") as s:
        f = s.measure()
    assert f["passed"] and f["sandbox"].startswith("bwrap") and "landlock" in f["sandbox"], f
    assert len(f["checked"]) == f["warmup_runs"] + f["runs"]
    assert sum(c["input"] == "benchmark input" for c in f["checked"]) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (side streams)")
def test_side_stream_rejected_on_gpu(at_toy: Path) -> None:
    """Rejected, or timed with its work: on the legacy default stream the worker's copy into the
    shared buffer waits for the side stream, and then "done" comes after ~0.25 s of spinning."""
    with Session(CHEATERS / "side_stream.py", "tiny", "cuda") as s:
        f = s.measure()
    assert not f["passed"] or f["median_s"] >= 0.2, f"side-stream cheater timed at {f['median_s']} s"
