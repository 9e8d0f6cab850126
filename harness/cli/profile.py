"""`auto-optim profile`: profile one call of the candidate (after warm-up) and write a markdown report.

Usage:
    auto-optim profile [--preset P] [--candidate FILE] [--device cpu|cuda] [--unsandboxed]
                       [--out profiles/NAME.md] [--title TITLE]

The call runs in the sandboxed worker like every other (harness/measure/session.py: a fresh input,
checked), under torch.profiler; what the report says, and why its kernel figures are the candidate's
claims, is harness/measure/profile.py's.
Exit: 0 written, 1 the candidate crashed or failed the gate, 2 broken setup.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import console, paths, _common
from harness.decide import floor
from harness.measure.profile import report, to_markdown
from harness.measure.session import Session
from harness.errors import Refused


def parser() -> argparse.ArgumentParser:
    """The options (harness/cli/person.py reads the person's powers from what this parser makes)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("--preset")
    p.add_argument("--candidate", type=Path)
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--out", type=Path, help="markdown report (default profiles/<candidate stem>.md)")
    p.add_argument("--title", help="heading of the report (default: the output file's stem)")
    p.add_argument("--unsandboxed", action="store_true", help="run the candidate without a sandbox")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    out = a.out or _common.root() / "profiles" / f"{(a.candidate or Path('optimize.py')).stem}.md"
    try:
        with Session(a.candidate, a.preset, a.device, unsandboxed=a.unsandboxed) as s:
            facts = s.measure()
            summary = s.profile(facts) if facts["passed"] else None
            floor.annotate(facts, s.goals, s.adapter, list(s.bench_x.shape), floor.load_peak(facts["gpu"]))
    except Refused as e:
        console.emit([f"FAILED (setup): {e}"], {"ok": False, "reason": f"setup: {e}"})
        return 2
    if summary is None:
        console.emit([f"FAILED: {facts['reason']}"], {"ok": False, "reason": facts["reason"]})
        return 1
    r = report(summary, facts)
    md = to_markdown(r, a.title or out.stem)
    _common.atomic_write(out, md)
    top = ", ".join(f"{k['name'][:40]} {k['pct']:.0f}%" for k in r["top"][:3])
    console.emit([f"profile written to {out}", f"  busy {r['busy_fraction']:.1%}, {r['launches']} launches; top: {top}"],
           {"ok": True, "out": str(out), "busy_fraction": r["busy_fraction"], "launches": r["launches"],
            "outside_largest": r["outside_largest"], "by_category_s": r["by_category_s"],
            "candidate_sha": facts["candidate_sha"], "markdown": md})
    return 0


if __name__ == "__main__":
    from harness.cli import person

    person.refuse_agent(parser(), sys.argv[1:], "harness/cli/profile.py")
    sys.exit(main())
