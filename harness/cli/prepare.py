"""Make the assets for a preset, and remake what is missing, damaged or stale: the input, its
strict-fp32 reference, the pool of fresh inputs with their references (harness/target/make_reference.py),
the frozen model's weights cache (loading the model remakes a damaged one), and once per machine
the probe of its peak rates that the floor is measured against (harness/decide/floor.py; not for a preset
of several ranks, whose rows have no floor).

Usage:
    auto-optim prepare [--preset P] [--device cpu|cuda] [--seeded] [--force]

Picks the preset as every tool does (full on CUDA, tiny on CPU). Every asset is checked as the
harness reads it (readable, the right shape and dtype, made from this input, these weights and
this model code); a sound one is kept, any other is made again, and a note on stderr says why.
--force remakes them all. The input comes from the target's own source (make_latent: a real clip
for the VAE when the network allows, else the seeded latent; the seeded input for any other
target); --seeded skips the clip. The quickstart:
    auto-optim prepare && auto-optim run --desc "first run on this machine"
Exit 0 ready, 2 could not make an asset (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any, Callable

from harness import console, machine, paths, _common
from harness.cli.phases import phase
from harness.errors import Refused

ASSETS = ("input", "reference", "pool")
# A disk or its permissions, not an asset: said as such (a full disk once read "run prepare.py").
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO, errno.EFBIG}


def disk_error(e: OSError) -> str:
    """An OSError of the disk or of permissions in one line: what, where, and what to do."""
    where = f" ({e.filename})" if e.filename else ""
    fix = ("free some space" if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else
           "make it writable by this user" if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "check the disk")
    return f"disk or permission error: {e.strerror or e}{where}: {fix}"


def problems(goals: dict[str, Any], adapter: Any, preset: str) -> dict[str, str]:
    """What is wrong with each asset of the preset, by name; {} when all are sound. The checks are
    the ones the harness makes when it reads them, so a sound asset here is one every tool accepts."""
    from harness.target import assets  # here, not at the top: run_experiment imports this module, and refuses before torch

    checks: dict[str, Callable[[], Any]] = {
        "input": lambda: assets.load_input_asset(goals, adapter, preset),
        "reference": lambda: assets.load_reference_asset(goals, adapter, preset),  # its input and model too
        "pool": lambda: assets.check_pool(goals, adapter, preset)}
    out = {}
    for name, check in checks.items():
        try:
            check()
        except Refused as e:
            out[name] = str(e).split(f"; {assets.REMAKE}")[0]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("--preset")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--seeded", action="store_true", help="use the seeded input, not a clip")
    p.add_argument("--force", action="store_true", help="remake every asset of the preset, sound or not")
    a = p.parse_args(argv)
    from harness.decide import floor  # after argparse: --help stays fast
    from harness.target import assets, make_latent, make_reference

    try:
        goals = _common.load_goals()
        device = a.device or machine.default_device()
        preset = _common.pick_preset(goals, a.preset, device)
        adapter = _common.load_adapter(goals)
        bad = {k: "--force" for k in ASSETS} if a.force else problems(goals, adapter, preset)
        for name, why in bad.items():
            if "not found" not in why and "no pool" not in why:
                print(f"prepare: remaking the {name}: {why}", file=sys.stderr)
        made = []
        if bad:
            phase(f"preparing the assets of preset {preset}: loading the model")
            model = adapter.load_model(device)  # once, for every asset made below
            if "input" in bad:
                mode = "seeded" if a.seeded else "default"
                phase("preparing the input")
                made.append(make_latent.run(preset, mode=mode, device=device, force=True, model=model)["path"])
            redo = [k for k in ("reference", "pool") if k in bad]  # a bad input fails the reference's check too
            if redo:
                only = redo[0] if len(redo) == 1 else None
                phase(f"preparing the {' and '.join(redo)}")
                made += make_reference.run(preset, device=device, force=True, model=model, only=only)["made"]
            del model
            left = problems(goals, adapter, preset)
            if left:  # what was just made must pass the same checks
                name, why = next(iter(left.items()))
                raise Refused(f"the {name} made now does not pass its check: {why}")
        else:
            adapter.load_model("cpu")  # the weights (a damaged cache is made again here, where it may be written)
        if goals.presets[preset].ranks == 1:  # a group's row has no floor: the probe is of one device
            peak, probed = floor.ensure_peak(device, adapter, force=a.force)
            if probed:
                made.append(str(floor.peak_path(peak["gpu"])))
    except Refused as e:  # make_latent's InputError is one, as are bad goals
        print(f"prepare: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in DISK_ERRORS:
            raise
        print(f"prepare: {disk_error(e)}; what was made before it is kept: run it again once that is fixed",
              file=sys.stderr)
        return 2
    console.emit([f"assets for preset {preset} ready in {assets.assets_dir()}" + (f" (made {len(made)})" if made else " (checked: all sound)")],
           {"preset": preset, "device": device, "made": made, "input": str(assets.input_path(preset)),
            "reference": str(assets.reference_path(preset)), "pool": str(assets.pool_dir(preset))})
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main, "prepare", "run it again: what was made is kept, the rest is made then"))
