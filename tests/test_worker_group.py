"""A preset of several ranks measured by the harness (issue 27 items 3 and 4): a worker group of 2
CPU processes (gloo) in one sandbox, the decode split in space (harness/worker/worker_group.py,
integrations/split_decode.py), on the narrow VAE (tests/narrow_vae: the real architecture).

- run_experiment at `tiny-2ranks`: the baseline and the split candidate recorded, rows whose gpu
  column names the 2 ranks, every output through the gate, the split on record; its largest
  difference from the strict-fp32 one-process decode (border rows included) far below a seam's.
- a rank that dies, or raises, while rank 0 is busy ends the call at once as a crash, and nothing
  of the group is left running.
- like with like: rows of one rank count are never the yardstick of another's.
- a target that cannot split a call (the toy) cannot use such a preset: one clear line.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest

from conftest import NARROW, REPO, TOY, VAE, make_vae_workspace, use
from harness import machine
from harness.errors import Refused
from harness.measure import process, profile
from harness.cli import run_experiment
from harness.ledger import results, rows as R
from harness.ledger.store import lock_file
from harness.measure.session import Session

PRESET = "tiny-2ranks"
CHEATERS = REPO / "tests" / "cheaters"
SEAM = 1e-2  # a slab border without the halo is off by 0.1 to 1.5 (tests/test_split_decode.py)


@pytest.fixture(scope="module")
def group_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The narrow VAE's workspace (goals.json as the repository's) with the 2-rank preset's assets."""
    from harness.target import make_latent, make_reference

    goals = json.loads((VAE / "goals.json").read_text())
    ws = make_vae_workspace(tmp_path_factory.mktemp("group") / "ws", goals | {"adapter": "narrow_vae.target"})
    (ws / "narrow_vae").symlink_to(NARROW, target_is_directory=True)
    with use(ws):
        make_latent.run(PRESET, mode="seeded", device="cpu")
        make_reference.run(PRESET, device="cpu")
    return ws


def test_a_split_decode_is_measured_and_recorded(group_workspace: Path, capsys: pytest.CaptureFixture) -> None:
    ws = group_workspace
    with use(ws):
        code = run_experiment.main(["--desc", "split in 2", "--preset", PRESET, "--device", "cpu", "--no-profile"])
    assert code == 0, capsys.readouterr().out[-3000:]
    base, cand = results.read(ws / "results.tsv")
    two = f"2x {machine.env_info('cpu')['gpu']}"
    assert (base["status"], base["gpu"], base["preset"]) == ("baseline", two, PRESET)
    assert "on one, the others idle" in base["desc"]  # the yardstick: fp32 eager on one rank
    assert cand["gpu"] == two and cand["status"] in ("keep", "revert", "inconclusive")  # measured and judged: every call passed
    assert "2 ranks" in cand["sandbox"] and cand["sandbox"].startswith("bwrap")
    facts = json.loads((ws / "records" / f"{cand['exp']}.json").read_text())["facts"]
    assert facts["ranks"] == 2 and facts["peak_mem_of"] == "the largest of 2 ranks"
    assert facts["floor_s"] is None and "a group of 2 ranks" in facts["floor_note"]
    assert facts["info"]["split"] == {"ranks": 2, "axis": "height", "latent_slabs": [1, 1], "backend": "gloo"}
    assert len(facts["checked"]) == facts["runs"] + facts["warmup_runs"]
    # Every element of every call's video, the rows on both sides of the slab border among them,
    # within 1e-3 of the strict-fp32 one-process decode: no seam (without the halo: over 0.1).
    assert facts["max_abs"] < SEAM / 10, facts["max_abs"]


def test_a_keepers_profile_counts_no_flops_and_the_group_stays_in_step(group_workspace: Path) -> None:
    """A keeper's profile: one profiled call, then the FLOP count, in a fresh group on throwaway
    inputs (not judged: harness/measure/session.py profile); in a group the count is one plain call on
    every rank (a counter failing on one rank alone would have that rank call again alone, and the
    group would hang), said so, and the ranks stay in step."""
    with use(group_workspace), Session(None, PRESET, "cpu", timeout=60) as s:
        facts = s.measure()
        assert facts["passed"], facts["reason"]
        summary = s.profile(facts)
        assert summary is not None, facts["reason"]
        claims = facts["claims"]  # what the worker reports of itself: the candidate's claims
        assert claims["executed_flops"] is None and "worker group" in claims["executed_flops_error"]
        assert s.count_flops(facts) and facts["passed"], facts["reason"]  # the group answers again
        assert len(facts["checked"]) == facts["runs"] + facts["warmup_runs"]  # no hidden input was profiled
    # Each checked call's launching threads, every rank's (issue 44): when its function returned and its
    # thread's CPU by then, within the call the harness timed; the keeper's profile shows them by rank.
    host = claims["host"]
    assert len(host) == len(facts["checked"]) and all(len(ranks) == 2 for ranks in host), host
    for ranks, call in zip(host, facts["checked"]):
        for returned, cpu in ranks:
            assert 0 < returned <= call["seconds"] + 0.05 and 0 < cpu <= returned + 0.05, (ranks, call)
    md = profile.to_markdown(profile.report(summary, facts), "a group")
    section = md.split("## The launching thread of each rank, over the")[1].split("\n## ")[0]
    timed = host[-facts["runs"]:]  # the warm-up calls come first
    shown = [ln.split(" | ")[1].split()[0] for ln in section.splitlines() if ln.startswith(("| 0 |", "| 1 |"))]
    assert shown == [f"{statistics.median(ranks[r][0] for ranks in timed):.4f}" for r in (0, 1)], section


RANK_1_FAILS = '''
import os, signal, time
import torch.distributed as dist
import torch.nn.functional as F  # integrations/split_decode.py reaches the convs through the module's F
from harness.errors import Refused


def build_decoder(model, example):
    def forward_fn(z):
        if dist.get_rank() == 1:
            {failure}
        time.sleep(600)  # rank 0 busy: only the group's watch can end this call soon
    return forward_fn, {{}}
'''


@pytest.mark.parametrize("failure, says", [
    ("os.kill(os.getpid(), signal.SIGKILL)", "rank 1 was killed by signal 9"),
    ("raise RuntimeError('rank 1 gives up')", "rank 1: candidate raised RuntimeError: rank 1 gives up"),
])
def test_a_rank_that_fails_ends_the_call_as_a_crash(group_workspace: Path, tmp_path: Path, failure: str,
                                                    says: str) -> None:
    cand = tmp_path / "optimize.py"
    cand.write_text(RANK_1_FAILS.format(failure=failure))
    t0 = time.monotonic()
    with use(group_workspace), Session(cand, PRESET, "cpu", timeout=60) as s:
        facts = s.measure()
    assert time.monotonic() - t0 < 30, "the group hung until the call's timeout"
    assert facts["status"] == "crash" and says in facts["reason"], facts["reason"]
    assert process.descendants(os.getpid())[1:] == [], "a rank outlived its group"


@pytest.mark.parametrize("unsandboxed", [False, True])
def test_no_rank_can_read_the_reference(group_workspace: Path, unsandboxed: bool) -> None:
    """tests/cheaters/rank_reads_reference.py: rank 1, a process rank 0 started, reads the
    reference and hands it to rank 0. In the sandbox every rank sees the project without its
    references: the build is a crash naming rank 1's failed read. Without it (--unsandboxed, a
    person's choice) the read succeeds and only the gate's fresh inputs stop the copy: the walls
    around the ranks are what refuse the read."""
    with use(group_workspace), Session(CHEATERS / "rank_reads_reference.py", PRESET, "cpu", timeout=60,
                                       unsandboxed=unsandboxed) as s:
        facts = s.measure()
    if unsandboxed:
        assert facts["status"] == "gate_fail", facts["reason"]  # built: rank 1 read the reference
    else:
        assert facts["status"] == "crash" and "rank 1" in facts["reason"], facts["reason"]
        assert "FileNotFoundError" in facts["reason"] or "PermissionError" in facts["reason"], facts["reason"]


@pytest.mark.parametrize("unsandboxed", [False, True])
def test_no_rank_reaches_the_harness(group_workspace: Path, tmp_path: Path, unsandboxed: bool) -> None:
    """tests/cheaters/group_reaches_out.py, on every rank: TCP to a port this process listens on,
    an abstract unix socket it listens on, a key in the host user's keyring, SIGCONT to every
    process it may signal. A group's ranks are left the sockets and signals by Landlock (gloo and
    NCCL need them among the ranks), so here the namespaces must hold, and the seccomp filter every
    rank inherits must refuse the key: nothing arrives, no key of any rank reaches this process's
    keyring, and this process (the harness) gets no signal. Unsandboxed (a person's choice) both
    sockets and the keyring are reached: the walls are what stop it. (The signal is not sent
    there: kill(-1) would wake other tests' stopped workers.)"""
    import signal
    import socket
    import threading
    import uuid

    from test_cheaters_isolation import cheater

    tcp = socket.create_server(("127.0.0.1", 0))
    name = f"auto-optim-test-{uuid.uuid4().hex[:12]}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + name)
    abstract.listen()
    heard: list[str] = []
    signalled: list[int] = []
    stop = threading.Event()

    def listen() -> None:
        for sock in (tcp, abstract):
            sock.settimeout(0.1)
        while not stop.is_set():
            for label, sock in (("tcp", tcp), ("abstract", abstract)):
                try:
                    conn = sock.accept()[0]
                except OSError:
                    continue
                heard.append(label)
                with conn:  # read what it sends before closing, so its send does not fail
                    conn.settimeout(1)
                    try:
                        conn.recv(16)
                    except OSError:
                        pass

    before = signal.signal(signal.SIGCONT, lambda n, _: signalled.append(n))
    os.kill(os.getpid(), signal.SIGCONT)  # the handler hears a SIGCONT (a control), then starts afresh
    assert signalled == [signal.SIGCONT]
    signalled.clear()
    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    path = cheater("group_reaches_out", tmp_path / "c", CHEAT_PORT=str(tcp.getsockname()[1]), CHEAT_ABSTRACT=name,
                   CHEAT_SIGNAL="0" if unsandboxed else "1")
    import importlib.util

    spec = importlib.util.spec_from_file_location("_keys", CHEATERS / "_keys.py")  # the keyring calls, from the host's side
    _keys = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_keys)

    try:
        with use(group_workspace), Session(path, PRESET, "cpu", timeout=60, unsandboxed=unsandboxed) as s:
            facts = s.measure()
        time.sleep(0.3)
    finally:
        keys = [(serial, desc) for serial, desc in _keys.keys_named(f"auto-optim-rank-{name}-")
                if _keys.search(_keys.USER, desc) > 0]
        for serial, _ in keys:
            _keys.invalidate(serial)
        stop.set()
        listener.join(timeout=5)
        signal.signal(signal.SIGCONT, before)
        tcp.close()
        abstract.close()
    assert facts["status"] in ("measured", "gate_fail"), facts["reason"]  # it ran: each rank tried
    reached = (facts.get("info") or {}).get("reached")
    if unsandboxed:  # both ranks reached all three: so in the sandbox, both ranks tried
        assert reached == ["tcp", "abstract", "keyring"] and heard.count("tcp") == heard.count("abstract") == 2, (reached, heard)
        assert sorted(desc[-1] for _, desc in keys) == ["0", "1"], keys
    else:
        assert reached == [] and not heard and not keys, (reached, heard, keys)
        assert not signalled, "a rank's SIGCONT reached the harness"


def test_prepare_for_a_group_skips_the_peak_probe(group_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's row has no floor, so prepare does not spend a fresh multi-GPU machine's minutes
    on the one-device peak probe (session 13: device time is what such a host is short of)."""
    from harness.decide import floor

    from harness.cli import prepare
    def no_probe(*_: object, **__: object) -> None:
        raise AssertionError("the peak probe ran for a preset of ranks")

    monkeypatch.setattr(floor, "ensure_peak", no_probe)
    with use(group_workspace):
        assert prepare.main(["--preset", PRESET, "--device", "cpu"]) == 0


def test_rows_of_other_rank_counts_are_never_the_yardstick() -> None:
    """ledger/rows.py matches keepers by (preset, gpu), and a group's gpu names its rank count: a
    faster 2-rank keeper never judges a 1-rank candidate, nor the other way round, even under one
    preset name (a goals.json that changed a preset's ranks)."""
    one, two = machine.env_info("cpu")["gpu"], machine.env_info("cpu", ranks=2)["gpu"]
    assert two == f"2x {one}" and machine.on_cpu(one) and machine.on_cpu(two)

    def row(exp: str, status: str, preset: str, gpu: str, metric: float) -> dict[str, str]:
        return {"exp": exp, "status": status, "preset": preset, "gpu": gpu, "metric": str(metric),
                "median_s": str(metric), "candidate_sha": exp}

    rows = [row("e001", "baseline", "tiny", one, 1.0), row("e002", "keep", "tiny", one, 0.5),
            row("e003", "baseline", "tiny", two, 0.9), row("e004", "keep", "tiny", two, 0.1),
            row("e005", "baseline", PRESET, two, 0.8), row("e006", "keep", PRESET, two, 0.05)]
    for preset, gpu, base, best in (("tiny", one, "e001", "e002"), ("tiny", two, "e003", "e004"),
                                    (PRESET, two, "e005", "e006")):
        assert R.baseline_row(rows, preset, gpu)["exp"] == base
        assert R.best_row(rows, preset, gpu)["exp"] == R.current_row(rows, preset, gpu)["exp"] == best
    assert R.baseline_row(rows, PRESET, one) is None  # no 1-rank rows there: a first run, a baseline of its own


def test_a_group_holds_the_lock_of_each_of_its_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-rank measurement holds both its GPUs' locks (runs/device_<i>.lock): a measurement on
    either waits; one on the next GPU goes ahead."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,4")
    with use(tmp_path), run_experiment.device_lock(2):
        runs = tmp_path / "runs"
        assert all(isinstance(lock_file(runs / f"device_{i}.lock", wait=False), str) for i in (2, 3))
        free = lock_file(runs / "device_4.lock", wait=False)
        assert not isinstance(free, str)
        free.close()


def test_a_preset_of_ranks_needs_a_target_that_splits(tmp_path: Path) -> None:
    """The toy's adapter has no build_split: a preset of 2 ranks is a setup error before anything
    starts, and a preset's ranks must be a whole number >= 1."""
    goals = json.loads((TOY / "goals.json").read_text())
    for ranks, says in ((2, "has no build_split to run a call across them"), (0, "ranks must be a whole number >= 1")):
        ws = tmp_path / f"ranks{ranks}"
        ws.mkdir()
        (ws / "toymodel").symlink_to(TOY / "toymodel", target_is_directory=True)
        goals["presets"]["tiny-2ranks"] = {**goals["presets"]["tiny"], "ranks": ranks}
        (ws / "goals.json").write_text(json.dumps(goals))
        with use(ws), pytest.raises(Refused, match=says):
            Session(None, "tiny-2ranks", "cpu")
