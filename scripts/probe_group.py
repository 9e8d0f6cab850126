"""Probe (GPUs of one host): a worker group started by the harness as run_experiment starts it,
at a small preset with a short timeout, and everything its ranks printed, so that a group that
hangs shows where (NCCL_DEBUG=INFO unless the environment sets it; the worker passes NCCL_* on).

    python scripts/probe_group.py                         # tiny-2ranks on the GPUs, sandboxed
    python scripts/probe_group.py --unsandboxed --timeout 60
"""

from __future__ import annotations

import argparse
import os

from harness.measure import process
from harness.measure.session import Session
from harness.target import assets, make_latent, make_reference


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny-2ranks")
    p.add_argument("--candidate", default="optimize.py")
    p.add_argument("--timeout", type=float, default=60, help="seconds for the build and for each call")
    p.add_argument("--unsandboxed", action="store_true")
    p.add_argument("--device", default="cuda", help="cpu: the same group over gloo")
    a = p.parse_args()
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    if not assets.input_path(a.preset).exists():
        make_latent.run(a.preset, mode="seeded", device=a.device)
    if not assets.reference_path(a.preset).exists():
        make_reference.run(a.preset, device=a.device)
    process.Tail.MAX_LINES = None  # keep every line the ranks print, not the last 200
    tails: list[process.Tail] = []
    keep = process.Tail.__init__

    def kept(self: process.Tail, stream) -> None:  # type: ignore[no-untyped-def]
        keep(self, stream)
        tails.append(self)

    process.Tail.__init__ = kept  # type: ignore[method-assign]
    try:
        with Session(a.candidate, a.preset, a.device, timeout=a.timeout, unsandboxed=a.unsandboxed) as s:
            facts = s.measure()
            label = s.sandbox_label()
        print(f"status {facts['status']}: {facts.get('reason')}; median {facts.get('median_s')}; {label}")
    finally:
        for t in tails:
            print("--- what the ranks printed ---")
            print("\n".join(t.lines))


if __name__ == "__main__":
    main()
