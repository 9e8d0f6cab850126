"""Make the assets for a preset if they are missing: the input, its strict-fp32 reference, the
pool of fresh inputs with their references (harness/make_reference.py), and once per machine the
probe of its peak rates that the floor is measured against (harness/floor.py).

Usage:
    python harness/prepare.py [--preset P] [--device cpu|cuda] [--seeded]

Picks the preset as every tool does (full on CUDA, tiny on CPU). Existing assets are kept; to
remake them run harness/make_latent.py / make_reference.py with --force. The input comes from
make_latent's default source (a real clip when the network allows, else the seeded latent);
--seeded skips the clip. The quickstart:
    python harness/prepare.py && python harness/run_experiment.py --desc "baseline: fp32 eager" && cat leaderboard.md
Exit 0 ready, 2 could not make an asset (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # last: see _common
from harness import _common as C  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--seeded", action="store_true", help="use the seeded input, not a clip")
    a = p.parse_args(argv)
    from harness import floor, make_latent, make_reference  # after argparse: --help stays fast

    try:
        goals = C.load_goals()
        device = a.device or C.default_device()
        preset = C.pick_preset(goals, a.preset, device)
        made = []
        if not C.input_path(preset).is_file():
            made.append(make_latent.run(preset, mode="seeded" if a.seeded else "default", device=device)["path"])
        adapter = C.load_adapter(goals)
        if not C.reference_path(preset).is_file() or not C.pool_dir(preset).is_dir():
            made += make_reference.run(preset, device=device, model=adapter.load_model(device))["made"]
        peak, probed = floor.ensure_peak(device, adapter)
        if probed:
            made.append(str(floor.peak_path(peak["gpu"])))
    except C.SetupError as e:  # make_latent's InputError is one, as are bad goals
        print(f"prepare: {e}", file=sys.stderr)
        return 2
    C.emit([f"assets for preset {preset} ready in {C.assets_dir()}" + (f" (made {len(made)})" if made else " (already there)")],
           {"preset": preset, "device": device, "made": made, "input": str(C.input_path(preset)),
            "reference": str(C.reference_path(preset)), "pool": str(C.pool_dir(preset))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
