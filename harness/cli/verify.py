"""The gate: does a candidate reproduce the frozen reference, honestly?

Usage:
    auto-optim verify [--preset P] [--candidate FILE] [--device cpu|cuda] [--unsandboxed]
                             [--frames-out F.pt] [--memory-gb N]

Exit 0 pass, 1 fail (the reason on one line), 2 broken setup (missing or stale assets, bad goals,
no sandbox). Importable: `check(candidate, preset=None, device=None) -> dict`.

verify measures exactly as bench and run_experiment do (harness/measure/session.py): the candidate runs in
a sandboxed worker, and every call, warm-up included, gets an input it has never seen (the
benchmark input once, pool inputs otherwise, in an unpredictable order) whose output is compared
with its reference by the target's gate (goals.json "gate", the adapter's `compare`). A pass
needs every output right, of the right shape and dtype, finite, and the input left unchanged.
verify makes three such calls (bench makes the warm-up and timed ones); it prints their times,
bench.py prints the statistics.

--frames-out: after a pass, save the benchmark output's worst frame (lowest quality) beside the
reference's, for run_experiment's quality strip (needs the adapter's optional `frames`).

--memory-gb N: the same calls with only N GB of memory free on each GPU, the rest held by this
process (harness/measure/memory_limit.py): a pass says the candidate, its CUDA context and caches
included, fits in N GB, whatever it reports about itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

from harness import console, paths
from harness.measure.memory_limit import gb_argument
from harness.measure.session import Session
from harness.errors import Refused

# The benchmark input and two fresh inputs (one with a strict-fp32 reference). bench and
# run_experiment check every one of their calls the same way; verify only needs fewer.
CALLS = 3


def worst_frame(adapter: Any, out: torch.Tensor, ref: torch.Tensor, gate: dict) -> dict[str, Any] | None:
    """The frame where the output is furthest from the reference (both [3, H, W] fp32), with its
    index and quality (as the gate computes it); None when the adapter has no `frames`."""
    if not hasattr(adapter, "frames"):
        return None
    cand, refs = adapter.frames(out), adapter.frames(ref)
    # frame by frame in fp64: a whole 720p clip in fp64 would be several GB
    mse = torch.stack([((c.double() - r.double()) ** 2).mean() for c, r in zip(cand, refs)])
    i = int(mse.argmax())
    frame_c, frame_r = cand[i].float().contiguous(), refs[i].float().contiguous()
    return {"index": i, "count": len(mse), "quality": adapter.compare(frame_c, frame_r, gate)["quality"],
            "reference": frame_r.clone(), "candidate": frame_c.clone()}


def save_worst_frame(adapter: Any, out: torch.Tensor, ref: torch.Tensor, gate: dict, path: Path,
                     facts: dict[str, Any]) -> None:
    """For the quality strip. A picture that cannot be made is reported in the facts; it never
    turns a passing candidate into a crash."""
    try:
        frame = worst_frame(adapter, out, ref, gate)
        if frame is not None:
            torch.save(frame, path)
            facts["worst_frame"] = {k: frame[k] for k in ("index", "count", "quality")}
    except Exception as e:  # noqa: BLE001
        facts["worst_frame_error"] = f"{type(e).__name__}: {e}"[:300]


def check(candidate: Path | str | None = None, preset: str | None = None, device: str | None = None,
          *, unsandboxed: bool = False, frames_out: Path | None = None,
          memory_gb: float | None = None) -> dict[str, Any]:
    """Verify a candidate; returns the session's facts (passed, reason, quality, ...). Raises
    Refused for a broken setup."""
    with Session(candidate, preset, device, unsandboxed=unsandboxed, memory_gb=memory_gb) as s:
        facts = s.measure(want_frame=frames_out is not None, calls=CALLS)
        out = facts.pop("_bench_out", None)
        if facts["passed"] and frames_out is not None and out is not None:
            save_worst_frame(s.adapter, out, s.bench_ref.cpu(), s.goals["gate"], Path(frames_out), facts)
    return facts


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def parser() -> argparse.ArgumentParser:
    """The options (harness/cli/person.py reads the person's powers from what this parser makes)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    paths.add_target_option(ap)
    ap.add_argument("--preset", help="preset name from goals.json (default: full on CUDA, tiny on CPU)")
    ap.add_argument("--candidate", help="candidate file (default: goals['candidate'], optimize.py)")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    ap.add_argument("--unsandboxed", action="store_true", help="run the candidate without a sandbox")
    ap.add_argument("--frames-out", type=Path, help="after a pass, save the worst frame and its reference here")
    ap.add_argument("--memory-gb", type=gb_argument, help="leave the worker only this many GB free on each GPU")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        facts = check(args.candidate, args.preset, args.device, unsandboxed=args.unsandboxed,
                      frames_out=args.frames_out, memory_gb=args.memory_gb)
    except Refused as e:
        print(f"verify: setup error: {str(e).strip().splitlines()[0]}", file=sys.stderr)  # one line
        return 2
    verdict = "PASS" if facts["passed"] else f"FAIL: {facts['reason']}"
    name = facts["quality_name"]
    limit = "" if args.memory_gb is None else f", {args.memory_gb:g} GB of GPU memory free"
    console.emit([f"verify {facts['candidate']} on {facts['preset']} ({facts['gpu']}, sandbox {facts['sandbox']}{limit}): {verdict}",
            f"worst of the {len(facts['checked'])} calls checked: {name} {_fmt(facts['quality'])}, "
            f"max abs {_fmt(facts['max_abs'], '.3g')}; benchmark input: {name} {_fmt(facts['benchmark_quality'])}, "
            f"max abs {_fmt(facts['benchmark_max_abs'], '.3g')}"], facts)
    return 0 if facts["passed"] else 1


if __name__ == "__main__":
    from harness.cli import person

    person.refuse_agent(parser(), sys.argv[1:], "harness/cli/verify.py")
    sys.exit(main())
