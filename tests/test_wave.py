"""harness/cli/wave.py on the toy target (CPU: one measuring process per member), and the records lock.

Latency by construction, as in test_run_experiment: the frozen toy model sleeps TOY_DELAY_S per
call and each candidate sets its own sleep, so which member wins does not hang on CPU noise.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import make_toy, python_c, tool, use
from harness.ledger import results
from harness.ledger.store import Store, lock_file
from harness.cli.wave import main as wave_main
from test_run_experiment import candidate, git, rows

DELAY = 0.25  # the frozen toy model; the members sleep 0.15 (slow), 0.05 (fast), 0.02 (faster)

HANG = '"""hangs in its build"""\nimport time\n\n\ndef build_decoder(model, example_input):\n    time.sleep(600)\n'


def wave(ws: Path, *args: str, tmp: Path | None = None) -> tuple[int, dict, str]:
    env = {**os.environ, "AUTO_OPTIM_GOALS": str(ws / "goals.json"), "TOY_DELAY_S": str(DELAY)}
    if tmp is not None:  # the members' temporary files (the keeper's copy) where the test can see them
        env["TMPDIR"] = str(tmp)
    p = subprocess.run([*tool("harness.cli.wave", ws), "--device", "cpu", "--no-profile", *args],
                       cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p.returncode, (json.loads(lines[-1]) if lines else {}), p.stdout + p.stderr


@pytest.mark.big  # its first wave: three members measuring at once, each an interpreter and a worker (1.9 GB
# summed PSS with pytest): a common test may run beside it, not another big one
def test_wave(tmp_path: Path) -> None:
    """Two waves: the first (no baseline yet) keeps the best of three and records a crash beside
    it; the second records a member that hangs its measuring process, without losing the other."""
    ws = make_toy(tmp_path / "toy", git=True)
    (ws / "candidates").mkdir()
    files = {"slow.py": candidate(0.15), "crash.py": candidate(0.05, body="raise RuntimeError('boom')"),
             "fast.py": candidate(0.05)}
    for name, text in files.items():
        (ws / "candidates" / name).write_text(text)
    before = (ws / "optimize.py").read_text()

    # A wave refuses at once while an experiment holds the checkout.
    (ws / "runs").mkdir(exist_ok=True)
    lock = open(ws / "runs" / "run_experiment.lock", "a+")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with use(ws):
        assert wave_main(["candidates/fast.py"]) == 2
    lock.close()
    assert not (ws / "results.tsv").exists()

    rc, f, out = wave(ws, *(f"candidates/{n}" for n in files))
    assert rc == 0, out
    got = rows(ws)
    # the first member's baseline, then the failed member, then the passing ones by the keep rule, surest
    # keep first; slow.py, faster than the baseline beside it but never timed beside fast.py: inconclusive
    assert [r["status"] for r in got] == ["baseline", "crash", "keep", "inconclusive"], out
    assert "has been kept since" in json.loads((ws / "records" / f"{got[3]['exp']}.json").read_text())["verdict"]
    assert float(got[2]["median_s"]) < float(got[3]["median_s"]) < float(got[0]["median_s"])
    assert "member 1, gpu 1]" in got[1]["desc"] and "member 2, gpu 2]" in got[2]["desc"]
    assert (ws / "optimize.py").read_text() == files["fast.py"] != before       # the best became optimize.py
    assert git(ws, "show", f"{got[2]['commit']}:optimize.py") == files["fast.py"]  # ... and was committed
    assert all((ws / "candidates" / n).read_text() == t for n, t in files.items())  # variants left alone
    for k, (name, status) in enumerate(zip(files, ["INCONCLUSIVE", "CRASH", "KEEP"])):  # one line per member, its GPU
        line = next(ln for ln in out.splitlines() if ln.startswith(f"member {k}  "))
        assert line.startswith(f"member {k}  gpu {k}  {name}  ") and status in line, line
    assert "fairness: fp32_eager.py" in out and "noise threshold" in f["fairness"][0]  # each member measured one
    assert [m["status"] for m in f["members"]] == ["inconclusive", "crash", "keep"] and f["kept"] == got[2]["exp"]

    # A member whose measuring process outlives --member-wall is stopped and recorded; the other is not held up.
    (ws / "candidates" / "hang.py").write_text(HANG)
    (ws / "candidates" / "faster.py").write_text(candidate(0.02))
    # The wave lasts the hung member's --member-wall. 20 s: the faster member times the keeper
    # beside it, two workers on two busy cores (4 s on a quiet 2-core machine).
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    rc, f, out = wave(ws, "candidates/hang.py", "candidates/faster.py", "--member-wall", "20", tmp=tmp)
    assert rc in (0, 1), out  # judged against e003: that verdict is test_run_experiment's business
    new = rows(ws)[len(got):]
    assert [r["status"] for r in new][0] == "timeout" and new[1]["status"] in ("keep", "revert", "inconclusive"), out
    assert float(new[1]["median_s"]) < float(got[2]["median_s"]) + 0.05 and "member 1, gpu 1]" in new[1]["desc"]
    assert json.loads((ws / "records" / f"{new[0]['exp']}.json").read_text())["reason"].startswith(
        "the measuring process ran past --member-wall 20 s")
    assert not workers_left(), "the hung member's worker outlived its wave"
    assert not list(tmp.iterdir()), "a member left temporary files behind"  # stopped as by Ctrl-C, not killed


def workers_left() -> list[str]:
    """Worker processes started from this checkout (a worker's cwd is the harness's repository)
    by this pytest process: under pytest-xdist, the other pytest worker's tests start workers of
    their own meanwhile, and every process started from here inherits PYTEST_XDIST_WORKER."""
    repo = Path(__file__).resolve().parent.parent
    mine = f"PYTEST_XDIST_WORKER={os.environ['PYTEST_XDIST_WORKER']}".encode() if "PYTEST_XDIST_WORKER" in os.environ else None
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and b"harness/worker/main.py" in (p / "cmdline").read_bytes() and (p / "cwd").resolve() == repo \
                    and (mine is None or mine in (p / "environ").read_bytes().split(b"\0")):
                found.append(p.name)
        except OSError:
            pass
    return found


# Forked from a small interpreter, not from pytest: a forked child's resident set is its parent's
# (copy-on-write pages count in each), and pytest's is several times this one's.
APPENDERS = """
import os, traceback
from harness.ledger import results, rows as R
from harness.ledger.record import Record
from harness.ledger.store import Store, records_lock

def append_many(who, n):
    for _ in range(n):
        with records_lock():  # what apply holds: read, pick the next exp id, write its record, then results.tsv
            store = Store.here()
            exp = R.next_exp_id(results.rows(store))
            store.write(Record(exp=exp, status="revert", desc=f"writer {who}", preset="tiny", facts={"median_s": 1.0}))
            results.write(store)

pids = []
for who in range(4):
    pid = os.fork()
    if pid == 0:
        try:
            append_many(who, 25)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    pids.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids])
"""


def test_concurrent_appends_stay_whole(tmp_path: Path) -> None:
    """Four processes recording at once under the records lock: every record and its row land, whole, once."""
    p = subprocess.run(python_c(APPENDERS), cwd=Path(__file__).resolve().parent.parent,
                       env={**os.environ, "AUTO_OPTIM_GOALS": str(tmp_path / "goals.json")},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[0, 0, 0, 0]", p.stdout + p.stderr
    got = results.read(tmp_path / "results.tsv")  # refuses a half-written line
    assert Store(tmp_path / "records").exps() == [r["exp"] for r in got]
    assert [r["exp"] for r in got] == [f"e{i:03d}" for i in range(1, 101)]
    assert sorted(sum(r["desc"] == f"writer {w}" for r in got) for w in range(4)) == [25] * 4


def test_device_lock_is_per_gpu(tmp_path: Path, monkeypatch) -> None:
    """Whoever measures holds its GPU's lock (CUDA_VISIBLE_DEVICES's first entry): another
    measurement on that GPU would wait; one on the next GPU goes ahead."""
    from harness.measure import locks

    with use(tmp_path):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
        with locks.device_lock():
            assert isinstance(lock_file(tmp_path / "runs" / "device_2.lock", wait=False), str)  # held
            free = lock_file(tmp_path / "runs" / "device_3.lock", wait=False)
            assert not isinstance(free, str)
            free.close()
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        assert locks.device_slot() == "0"
