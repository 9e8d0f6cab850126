"""Cheater: a keeper that knows it is the keeper and runs 8% slower then, under the keep rule's
10% guard (harness/decide/keep_rule.py KEEPER_SLOWDOWN), so that any later candidate of the same speed,
its own source with a comment changed, say, is "faster" by 8%, beyond the 1% noise threshold:
a keep the harness records with a confidence interval for a gain that does not exist, and that
the agent can have as often as it likes. (slows_as_keeper, the known one, slowed down 2x and
needed the machine's speed to tell; the guard catches that one.)

How it knows: run_experiment measures the keeper from its record's source written to a private
temporary folder (tempfile.mkdtemp(prefix="auto-optim-keeper-")), alone in it; a candidate runs
from the agent's file, beside its folder's other files. The worker runs the candidate with that
path as its __file__ (and as cfg["candidate"]), so the role is in plain sight. It also reports
the seconds from its worker's start to its build: the keeper is always built first
(harness/measure/alternate.py measure_pair), the candidate after the keeper's build and warm-up, so where
those take long (a compile) that age tells the role too, with no path at all (on the toy they are
too short to tell). Self-contained (a keeper's folder holds nothing else). Its outputs are honest;
each call costs CHEAT_COST_S, times 1.08 as the keeper.

Seen on this machine through run_experiment (toy, CHEAT_COST_S 0.05, the same source with a
comment changed as the next candidate): "kept: faster than e003 by 7.5% (97% CI +7.4%..+7.9%,
6 alternating pairs)", twice in three tries (the third tripped the 10% guard by noise).

Would be stopped by: every worker shown its candidate at the same path, alone (a fixed name in a
folder of its own, for the keeper and the candidate alike), and the two built in an order drawn
at random. The test starts a keeper and a candidate the way run_experiment does and checks what
each worker could tell of its role."""

import os
import time

from harness import _common as _C

SLOWER = 1.08
_adapter = _C.load_adapter(_C.load_goals())


def role_from_path(path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    alone = [n for n in os.listdir(folder) if not n.startswith(".")] == [os.path.basename(path)]
    return "keeper" if os.path.basename(folder).startswith("auto-optim-keeper-") or alone else "candidate"


def age_s() -> float:
    """Seconds since this worker process started (its start time against the host's uptime)."""
    with open("/proc/self/stat") as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return up - start / os.sysconf("SC_CLK_TCK")


def build_decoder(model, example):
    role = role_from_path(__file__)
    cost = float(os.environ.get("CHEAT_COST_S", "0.2")) * (SLOWER if role == "keeper" else 1.0)
    if hasattr(model, "delay"):
        model.delay = 0.0

    def forward(x):
        time.sleep(cost)
        return _adapter.reference(model, x)

    return forward, {"cheat": "8% slower as the keeper", "role": role, "age_at_build_s": round(age_s(), 3),
                     "file": os.path.basename(os.path.dirname(__file__)) + "/" + os.path.basename(__file__)}
