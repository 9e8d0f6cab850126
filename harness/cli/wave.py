"""A wave: measure several candidate files at once, one per GPU, then judge and record every one.

Usage:
    auto-optim wave candidates/a.py candidates/b.py ... [--desc TEXT] [--gpus 0,1,2,3]
                           [--preset P] [--device cpu|cuda] [--timeout S] [--member-wall S]
                           [--no-profile] [--unsandboxed]
    auto-optim wave optimize.py --repeat 4      # the same file on every GPU: how fair are they?

Measuring. Member k runs `run_experiment.py --measure-only --record-out` (the one measuring path)
in its own process with CUDA_VISIBLE_DEVICES set to GPU --gpus[k % len]; default: every visible GPU
(on a CPU, one slot per member). Members beyond the GPU count wait for their GPU's earlier
members; run_experiment's device lock keeps any other measurement off a GPU that is measuring.
The wave holds the checkout lock (runs/run_experiment.lock) from start to end, so a single
experiment refuses while it runs, and the other way round.

Judging. When every member is done its records go through run_experiment's apply, in a fixed
order: failed members first (member order), then passing members by the keep rule itself
(harness/decide/keep_rule.py would_be): those it would keep first, the one whose gain over the keeper
timed beside it is surest (the interval's lower end) first; then the rest. So the keep rule is one
experiment's: the first passing member is judged against the current keeper (timed beside it on
its GPU); once one is kept, a later member, timed beside the keeper it replaced, stays a revert
where the pairs showed no gain, and is otherwise inconclusive (never judged against a recorded
figure: measure it again beside the new keeper); at most one is kept (committed as optimize.py; a
candidate file is never modified). Every member is a row; its desc names the wave, member and GPU. A member whose
measuring process dies (host out of memory, a harness crash) or outlives --member-wall (then
stopped as by Ctrl-C, so it closes its worker and removes its temporary files) is a
`crash` / `timeout` row made here; the others go on. With no baseline row for this GPU yet, every
member measures one (run_experiment does); the first is recorded, the rest are printed.

Fairness. For each source measured more than once (--repeat, the same file twice, or the baseline)
it prints the median on each GPU with its interval (the keep rule's sign test) and whether the GPUs
agree within goals.json noise_threshold, lie apart by more than it, or cannot tell (keep_rule.agreement). Members are judged against this GPU model's one baseline, as one experiment is;
each record carries its gpu_index, so a baseline per GPU can follow if those figures say so.

Exit: 0 a member was kept, 1 every member recorded and none kept, 2 refused (nothing recorded).
"""

from __future__ import annotations

import argparse
import ast
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import console, frozen, hashing, machine, paths, _common
from harness.ledger import rows as R
from harness.ledger.results import check_complete, rows as recorded_rows
from harness.ledger.store import utc_now
from harness.decide import keep_rule
from harness import start
from harness.measure import locks
from harness.cli import run_experiment
from harness.measure import process
from harness.sandbox import snapshot
from harness.errors import Refused

HARNESS = Path(__file__).resolve().parents[1]
MEMBER_WALL_S = 3 * 3600.0  # a member's measuring process, build and profile included
STOP_GRACE_S = 30.0         # from Ctrl-C to the kill: a session's close waits up to 5 s for each of two workers
_live: set[int] = set()     # the members' measuring processes now running
_lock = threading.Lock()


def stop(proc: subprocess.Popen) -> None:
    """Stop a member's measuring process as Ctrl-C would (it closes its worker and removes its
    temporary files: the keeper's copy), killed if it has not ended STOP_GRACE_S later."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def kill_orphans() -> None:
    """Kill what a stopped member left: this process is a subreaper, so its worker (and anything
    that worker started) was re-parented here. Children that are live members are spared."""
    with _lock:
        process.kill_orphans(spare=set(_live))


def gpu_slots(a: argparse.Namespace, device: str, members: int) -> list[str]:
    if a.gpus:
        return [g.strip() for g in a.gpus.split(",") if g.strip()]
    if device == "cpu":
        return [str(i) for i in range(members)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [g.strip() for g in visible.split(",") if g.strip()]
    import torch  # device_count asks NVML: no CUDA context in this process

    return [str(i) for i in range(torch.cuda.device_count())]


def member_desc(path: Path, source: str, desc: str | None) -> str:
    """--desc, else the first line of the candidate's docstring (parsed, never imported), else its name."""
    if desc:
        return desc
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        doc = ""
    return doc.strip().splitlines()[0] if doc.strip() else path.name


def measure_member(m: dict[str, Any], a: argparse.Namespace, out: Path) -> None:
    """Run one member's measuring process on its GPU; fill m["recs"] (its records, or one made here)."""
    # Every value glued to its option (--desc=TEXT): a desc that begins with "-" is still a desc.
    cmd = start.command("harness.cli.run_experiment", "--measure-only", f"--record-out={m['record']}",
                        f"--desc={m['desc']}", f"--candidate={m['path']}")  # this package's, by its folder
    for flag, value in (("--preset", a.preset), ("--device", a.device), ("--timeout", a.timeout)):
        if value is not None:
            cmd.append(f"{flag}={value}")
    cmd += [f for f, on in (("--no-profile", a.no_profile), ("--unsandboxed", a.unsandboxed)) if on]
    # The host's cores shared out: members that each start as many threads as there are cores
    # slowed each other's start-up twofold (four on a 64-core H200 host).
    threads = str(max(1, (os.cpu_count() or 1) // m["parallel"]))
    # A temporary folder of its own (the keeper's copy goes there), removed here however it ended:
    # a member stopped at --member-wall whose teardown outlasts STOP_GRACE_S is killed before its
    # own clean-up runs (seen on a loaded 2-core CI machine).
    member_tmp = tempfile.mkdtemp(prefix="auto-optim-member-")
    env = {"OMP_NUM_THREADS": threads, **os.environ, "CUDA_VISIBLE_DEVICES": m["gpu"], "TMPDIR": member_tmp}
    t0 = time.perf_counter()
    try:
        with open(out / f"m{m['k']}.log", "w") as log:
            with _lock:  # registered before another member's kill_orphans can see it
                proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                _live.add(proc.pid)
            try:
                code = proc.wait(timeout=a.member_wall)
            except subprocess.TimeoutExpired:
                code = None
                stop(proc)
                kill_orphans()  # its worker (a session of its own) is now this process's child
            with _lock:
                _live.discard(proc.pid)
    finally:
        shutil.rmtree(member_tmp, ignore_errors=True)
    m["wall_s"] = time.perf_counter() - t0
    if code == 0 and m["record"].is_file():
        try:  # signed by the member with this person's key, every field checked
            m["recs"] = run_experiment.read_record_file(m["record"], _common.load_goals())
        except Refused as e:
            m["refused"] = str(e)
        return
    tail = [ln for ln in (out / f"m{m['k']}.log").read_text(errors="replace").splitlines() if ln.strip()]
    if code == 2:  # refused (frozen files changed, assets missing): the wave refuses, as one experiment would
        said = [ln[len("REFUSED: "):] for ln in tail if ln.startswith("REFUSED: ")]
        m["refused"] = (said or tail or ["?"])[-1]
    elif code is None:
        m["failure"] = ("timeout", f"the measuring process ran past --member-wall {a.member_wall:.0f} s "
                                   "and was stopped")
    else:
        oom = " (out of memory?)" if code == -9 else ""
        how = f"killed by signal {-code}{oom}" if code < 0 else f"exited {code}"
        m["failure"] = ("crash", f"the measuring process {how}" + (f": {tail[-1][:300]}" if tail else ""))


def made_here(m: dict[str, Any], like: dict[str, Any], gpu_name: str) -> dict[str, Any]:
    """The record of a member whose measuring process left none: a red row, like any failure."""
    status, reason = m["failure"]
    return {"desc": m["desc"], "preset": like["preset"], "device": like["device"], "frozen_hash": like["frozen_hash"],
            "timestamp": utc_now(), "rebaseline": False, "candidate_file": str(m["path"]), "source": m["source"],
            "candidate_sha": hashing.sha256_bytes(m["source"].encode())[:16], "facts": {"gpu": gpu_name},
            "outcome": status, "reason": reason, "wall_s": m["wall_s"], "gpu_index": m["gpu"],
            "profile_md": None, "strip_png": None}


def judging_order(members: list[dict[str, Any]], goals: dict[str, Any], best: dict[str, Any] | None,
                  current: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Failed members first (member order), then passing ones in the keep rule's own order
    (keep_rule.would_be against the current keeper, which each was timed beside): the surest keep
    is judged first, every later one against what that left."""
    failed = [m for m in members if m["rec"]["outcome"] != "measured"]
    passed = [m for m in members if m["rec"]["outcome"] == "measured"]
    return failed + sorted(passed, key=lambda m: (*keep_rule.would_be(m["rec"], goals, best, current), m["k"]))


def fairness(measured: list[tuple[str, str, list[float]]], noise: float) -> list[str]:
    """(what, gpu, timed seconds) of every passing measurement -> a line per source measured more
    than once: each GPU's median and its interval, and whether they agree (keep_rule.agreement)."""
    lines = []
    for what in dict.fromkeys(w for w, _, _ in measured):
        runs = [(g, times) for w, g, times in measured if w == what]
        if len(runs) < 2:
            continue
        per_gpu = []
        for g, times in runs:
            mid, low, high, conf = keep_rule.interval([math.log(t) for t in times])
            per_gpu.append(f"gpu {g} {math.exp(mid):.4g} s ({conf:.0%} CI {math.exp(low):.4g}..{math.exp(high):.4g})")
        said = keep_rule.agreement(runs, noise)
        lines.append(f"fairness: {what}: {', '.join(per_gpu)}; " + {
            "within": f"within the {noise:.0%} noise threshold of each other",
            "OUTSIDE": f"OUTSIDE the {noise:.0%} noise threshold: these GPUs do not measure alike",
            "cannot tell": f"cannot tell against the {noise:.0%} noise threshold: the intervals are wider than it"}[said])
    return lines


def wave_keepers(recorded: list[dict[str, Any]], preset: str, goals: dict[str, Any]) -> tuple[Any, Any]:
    """(best, current): the keepers the members were timed beside, as results.tsv now holds them
    (after a first wave's baseline is recorded)."""
    rows = recorded_rows()
    gpu = next((r["facts"]["gpu"] for r in recorded if r.get("facts", {}).get("gpu")), None)
    return R.best_row(rows, preset, gpu, goals.better), R.current_row(rows, preset, gpu)


def run_wave(a: argparse.Namespace, goals: dict[str, Any]) -> int:
    device = a.device or machine.default_device()
    files = [Path(os.path.abspath(f)) for f in a.files for _ in range(a.repeat)]  # never resolved: a link is refused
    sources = {}
    for f in files:
        try:  # read without following a link (harness/sandbox/snapshot.py); each member reads its own copy again
            sources[f] = snapshot.read(f, _common.root()).decode()
        except FileNotFoundError:
            raise Refused(f"candidate file not found: {f}") from None
        except snapshot.nofollow.NotPlain as e:
            raise Refused(str(e)) from None
    check_complete()  # before minutes of measuring, as run_experiment does: apply checks again
    slots = gpu_slots(a, device, len(files))
    if not slots:
        raise Refused("no GPU to measure on (pass --gpus, or --device cpu)")
    preset = _common.pick_preset(goals, a.preset, device)
    tag = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = _common.root() / "runs" / "wave" / tag
    out.mkdir(parents=True, exist_ok=True)
    members = []
    for k, f in enumerate(files):
        source = sources[f]
        gpu = slots[k % len(slots)]
        desc = f"{member_desc(f, source, a.desc)} [wave {tag} member {k}, gpu {gpu}]"
        members.append({"k": k, "path": f, "source": source, "gpu": gpu, "desc": desc, "record": out / f"m{k}.json",
                        "parallel": min(len(slots), len(files))})
    print(f"wave {tag}: {len(members)} members on GPUs {','.join(slots)} ({device}, preset {preset}); logs in {out}")
    frozen_hash = frozen.frozen_hash()
    process.become_subreaper()
    t0 = time.perf_counter()
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for m in members:
        by_gpu.setdefault(m["gpu"], []).append(m)
    threads = [threading.Thread(target=lambda q=q: [measure_member(m, a, out) for m in q]) for q in by_gpu.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0

    refused = [m for m in members if "refused" in m]
    if refused:
        raise Refused(f"member {refused[0]['k']} was refused, nothing recorded: {refused[0]['refused']}")
    recorded = [r for m in members for r in m.get("recs", [])]
    like = recorded[0] if recorded else {"preset": preset, "device": device, "frozen_hash": frozen_hash}
    gpu_name = next((r["facts"]["gpu"] for r in recorded if r.get("facts", {}).get("gpu")), None)
    for m in members:
        if "recs" not in m:
            gpu_name = gpu_name or machine.env_info(device)["gpu"]
            m["recs"] = [made_here(m, like, gpu_name)]
        m["rec"] = m["recs"][-1]
    baselines = [(m, r) for m in members for r in m["recs"][:-1] if r.get("rebaseline")]
    results, kept = [], None
    if baselines:  # no baseline row for this GPU: the first member's is recorded, the others are printed
        code, facts = run_experiment.apply(baselines[0][1], goals)
        results.append(facts)
    order = judging_order(members, goals, *wave_keepers(recorded, preset, goals))
    for m in order:
        code, facts = run_experiment.apply(m["rec"], goals)
        m["result"] = facts
        results.append(facts)
        kept = kept or (m if facts["status"] == "keep" else None)

    lines = []
    for m in members:
        row = m["result"]["row"]
        med = f"median {row['median_s']:.4g} s" if row.get("median_s") is not None else "no median"
        why = f" ({m['result']['reason']})" if m["result"].get("reason") else ""
        lines.append(f"member {m['k']}  gpu {m['gpu']}  {m['path'].name}  {med}  {m['result']['status'].upper()}  "
                     f"{m['result']['exp']}{why}")
    lines.append(f"kept: {kept['result']['exp']} ({kept['path'].name}), now optimize.py and committed" if kept
                 else "kept: none; optimize.py stays at the best keeper")
    if len(baselines) > 1:
        others = ", ".join(str(m["k"]) for m, _ in baselines[1:])
        lines.append(f"baseline: recorded from member {baselines[0][0]['k']}; member{'s' if len(baselines) > 2 else ''} "
                     f"{others} measured one too (printed below, not rows)")
    measured = [(f"{Path(r['candidate_file']).name} ({r['candidate_sha'][:8]})", str(r.get("gpu_index", m["gpu"])),
                 r["facts"]["times_s"]) for m in members for r in m["recs"] if r["outcome"] == "measured"]
    fair = fairness(measured, goals.noise)
    lines += fair
    lines.append(f"wave wall time {wall:.1f} s (longest member {max(m['wall_s'] for m in members):.1f} s)")
    console.emit(lines, {"wave": tag, "exps": [r["exp"] for r in results], "kept": kept["result"]["exp"] if kept else None,
                   "wall_s": round(wall, 3), "fairness": fair,
                   "members": [{"k": m["k"], "gpu": m["gpu"], "file": str(m["path"]), "exp": m["result"]["exp"],
                                "status": m["result"]["status"], "median_s": m["result"]["row"].get("median_s"),
                                "wall_s": round(m["wall_s"], 3)} for m in members]})
    return 0 if kept and not any(r.get("unsaved") for r in results) else 1  # unsaved: recorded, not committed


def parser() -> argparse.ArgumentParser:
    """The options (harness/cli/person.py reads the person's powers from what this parser makes)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("files", nargs="+", type=Path, help="candidate files (candidates/*.py); never modified")
    p.add_argument("--repeat", type=int, default=1, help="measure each file this many times (fairness)")
    p.add_argument("--desc", help="one desc for every member (default: each file's docstring, first line)")
    p.add_argument("--gpus", help="comma-separated GPU indices (default: every visible GPU)")
    p.add_argument("--preset")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--timeout", type=_common.seconds, help="seconds allowed for each member's build and each call")
    p.add_argument("--member-wall", type=float, default=MEMBER_WALL_S,
                   help="seconds a member's measuring process may run in all")
    p.add_argument("--no-profile", action="store_true", help="skip profiling would-be keepers")
    p.add_argument("--unsandboxed", action="store_true", help="as run_experiment's (every row says so)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))


def run(a: argparse.Namespace) -> int:
    """A wave as parsed (harness/cli/door.py builds its Namespace from request.json)."""
    try:
        goals = _common.load_goals()
        if a.repeat < 1:
            raise Refused("--repeat must be at least 1")
        lock = locks.acquire_lock()
        try:
            return run_wave(a, goals)
        finally:
            lock.close()
    except Refused as e:
        print(f"wave: refused: {e}", file=sys.stderr)
        console.emit([f"REFUSED: {e}"], {"status": "refused", "reason": str(e)})
        return 2


if __name__ == "__main__":
    from harness.cli import person

    person.refuse_agent(parser(), sys.argv[1:], "harness/cli/wave.py")
    sys.exit(main())
