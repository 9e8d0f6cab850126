"""Run the test suite and report its wall time and peak memory (issue 15's budget: 4 min, 4 GB).

    python scripts/measure_tests.py [--per-test N] [pytest args...]   # default: -q -n 2 (README's)

Peak memory is the largest sum, over one sample, of the proportional set size (PSS) of pytest and
every process below it (workers, sandboxed candidates, fresh interpreters), sampled every 0.5 s
from /proc, so no package is needed. PSS splits a shared page between the processes that map it
(libtorch's code, a memory-mapped weights file, a forked child's copy-on-write pages), so the sum
is what the tree holds. The sum of resident set sizes (RSS) is printed beside it: it counts such a
page once per process (with torch imported, about 0.3 GB of shared code in every process), an
upper bound. The processes at the peak are listed. The machine's load average is
printed too: other jobs on the same cores stretch the wall time, not the CPU time.

--per-test N also loads this file as a pytest plugin and prints the N tests (setup, call and
teardown together) that took the most wall time, with the CPU seconds they cost and the peak summed
PSS while they ran. The CPU is read in the process that runs the test (under pytest-xdist, its
worker): its own and that of every child it waited for (os.times()), so the sandboxed workers and
harness tools a test starts count in it, whatever else the machine is doing. The wait for the
`alone`/`big` lock is not in a test's wall time (tests/conftest.py takes the lock around this
plugin's timing): it is in the seconds between a worker's tests, printed per xdist worker. Last, the
machine's idle core-seconds over the run (/proc/stat, read with each memory sample) and the tests
that were running while the cores idled, each with its share: with two workers on two cores, an idle
core is a test waiting (a sleep, a child's startup, a lock), which is wall time no CPU cut removes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOG_ENV = "MEASURE_TESTS_LOG"
CORES = os.cpu_count() or 1


def children() -> dict[int, list[int]]:
    """ppid -> pids, for every process /proc lists now."""
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def pss_rss(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in bytes, from /proc/PID/smaps_rollup (kB)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return fields["Pss"], fields["Rss"]


def tree_memory(root: int) -> tuple[int, int, list[tuple[int, int, str]]]:
    """PSS and RSS summed over `root` and all its descendants, and (PSS, RSS, command line) per process."""
    tree, pss, rss, todo, each = children(), 0, 0, [root], []
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, ()))
        try:
            p, r = pss_rss(pid)
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, KeyError, ValueError):
            continue  # gone meanwhile (or a kernel thread)
        pss, rss = pss + p, rss + r
        each.append((p, r, cmd.strip()))
    return pss, rss, each


# --- the pytest plugin half (-p measure_tests: loaded in every process that runs tests) -----------

def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001
    """Around one test's setup, call and teardown, in the process that runs it (an xdist worker's,
    where the controller's report hooks would see none of its CPU). One line each, appended."""
    t0, c0 = time.time(), _cpu()
    yield
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"id": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "-"),
                                "t0": t0, "t1": time.time(), "cpu": _cpu() - c0}) + "\n")


# --- the runner ------------------------------------------------------------------------------------

def cpu_jiffies() -> tuple[int, int]:
    """(all, idle) of the machine's CPU time since boot, in jiffies: /proc/stat's first line, idle with
    iowait."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(fields), fields[3] + fields[4]


def idle_by_test(tests: list[dict], samples: list[tuple[float, int, int, int]]) -> tuple[float, dict[str, float]]:
    """The machine's idle core-seconds over the run, from /proc/stat between samples, and each test's share:
    an interval's idle time is split among the tests running at its middle ("(between tests)" if none)."""
    total, share = 0.0, {}
    for (a, _, all_a, idle_a), (b, _, all_b, idle_b) in zip(samples, samples[1:]):
        if all_b <= all_a:
            continue
        idle = (idle_b - idle_a) / (all_b - all_a) * CORES * (b - a)
        total += idle
        running = [t["id"] for t in tests if t["t0"] <= (a + b) / 2 < t["t1"]] or ["(between tests)"]
        for name in running:
            share[name] = share.get(name, 0.0) + idle / len(running)
    return total, share


def print_waits(tests: list[dict]) -> None:
    """Each xdist worker's time between its tests: mostly the wait for the `alone`/`big` lock, which
    tests/conftest.py takes outside this file's timing, while that core has nothing to do."""
    by_worker: dict[str, list[dict]] = {}
    for t in sorted(tests, key=lambda t: t["t0"]):
        by_worker.setdefault(t["worker"], []).append(t)
    for worker, mine in sorted(by_worker.items()):
        gaps = [(b["t0"] - a["t1"], b["id"]) for a, b in zip(mine, mine[1:]) if b["t0"] - a["t1"] > 1.0]
        print(f"measure_tests: worker {worker}: {len(mine)} tests, {sum(g for g, _ in gaps):.1f} s between tests"
              + "".join(f"\n  {g:7.1f} s before {name}" for g, name in sorted(gaps, reverse=True)[:5]))


def main() -> int:
    args = sys.argv[1:]
    per_test = 0
    if args[:1] == ["--per-test"]:
        per_test, args = int(args[1]), args[2:]
    args = args or ["-q", "-n", "2"]
    env = dict(os.environ)
    log = None
    if per_test:
        log = Path(tempfile.mkstemp(prefix="measure_tests_", suffix=".jsonl")[1])
        env[LOG_ENV] = str(log)
        # The plugin's folder holds only this file: putting scripts/ itself on the path would let
        # scripts/sky shadow a missing skypilot in every process the tests start.
        plugin_dir = Path(tempfile.mkdtemp(prefix="measure_tests_"))
        (plugin_dir / "measure_tests.py").symlink_to(Path(__file__).resolve())
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_dir), env.get("PYTHONPATH")]))
        args = ["-p", "measure_tests", *args]
    load0 = os.getloadavg()
    cpu0 = os.times()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=REPO, env=env)
    peak = peak_at = peak_rss = 0.0
    at_peak: list[tuple[int, int, str]] = []
    samples: list[tuple[float, int, int, int]] = []  # (time, summed PSS, /proc/stat's all and idle jiffies)
    while proc.poll() is None:
        pss, rss, each = tree_memory(proc.pid)
        samples.append((time.time(), pss, *cpu_jiffies()))
        peak_rss = max(peak_rss, rss)
        if pss > peak:
            peak, peak_at, at_peak = pss, time.monotonic() - start, each
        time.sleep(0.5)  # reading smaps_rollup costs CPU: at 0.2 s, a tenth of a core
    wall = time.monotonic() - start
    cpu1 = os.times()
    cpu = cpu1.children_user + cpu1.children_system - cpu0.children_user - cpu0.children_system
    load1 = os.getloadavg()
    if log is not None:
        tests = [json.loads(line) for line in log.read_text().splitlines()]
        log.unlink()
        for t in tests:
            t["pss"] = max((r for s, r, *_ in samples if t["t0"] <= s <= t["t1"]), default=0)
        print(f"\nmeasure_tests: the {per_test} longest tests (wall s, CPU s, peak summed PSS GiB):")
        for t in sorted(tests, key=lambda t: -(t["t1"] - t["t0"]))[:per_test]:
            print(f"  {t['t1'] - t['t0']:7.1f} {t['cpu']:7.1f} {t['pss'] / 2**30:6.2f}  {t['id']}")
        print(f"measure_tests: the {per_test} with the highest peak PSS:")
        for t in sorted(tests, key=lambda t: -t["pss"])[:per_test]:
            print(f"  {t['t1'] - t['t0']:7.1f} {t['cpu']:7.1f} {t['pss'] / 2**30:6.2f}  {t['id']}")
        print(f"measure_tests: {len(tests)} tests, {sum(t['cpu'] for t in tests):.0f} CPU s in tests")
        print_waits(tests)
        idle, share = idle_by_test(tests, samples)
        print(f"measure_tests: the machine idle {idle:.0f} core-s of {wall * CORES:.0f}; the tests "
              f"running when it was (their share of that idle time, s):")
        for name, s in sorted(share.items(), key=lambda kv: -kv[1])[:min(per_test, 15)]:
            print(f"  {s:7.1f}  {name}")
    print(f"measure_tests: the processes at the peak ({peak / 2**30:.2f} GiB PSS; each: PSS, RSS):")
    for pss, rss, cmd in sorted(at_peak, reverse=True):
        print(f"  {pss / 2**30:5.2f} {rss / 2**30:5.2f} GiB  {cmd[:140]}")
    print(f"measure_tests: exit {proc.returncode}; wall {wall:.1f} s ({wall / 60:.2f} min); CPU {cpu:.0f} s "
          f"(pytest and its children); peak memory {peak / 2**30:.2f} GiB ({peak / 1e9:.2f} GB) summed PSS at "
          f"{peak_at:.0f} s (summed RSS peaked at {peak_rss / 2**30:.2f} GiB); "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f} (1/5/15 min) after; "
          f"{CORES} CPUs", flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
