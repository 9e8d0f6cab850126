"""Cheater: writes its own OOM preference back to 0 (seen at 107ca0f, where the worker set it to
1000 itself, from inside: the candidate, running in the same process, undid it), so that under
memory pressure the kernel weighs the harness beside it the same, and may kill the harness first.
It reports what it read before and after the write; its calls are honest.

Stopped by: the preference is written before the worker exists, by the shell that starts it
(harness/sandbox/cgroup.py entering). Written by a harness holding CAP_SYS_RESOURCE (root on a GPU
machine), that also sets the floor below which the worker cannot write it; a harness without
that capability cannot stop the write, and then the memory cgroup's bound is what holds (the
test checks the refusal only where the harness holds the capability)."""

from _target import honest


def build_decoder(model, example):
    path = "/proc/self/oom_score_adj"
    before = open(path).read().strip()
    try:
        with open(path, "w") as f:
            f.write("0")
        wrote = "written"
    except OSError as e:
        wrote = f"refused: {e.strerror}"
    after = open(path).read().strip()
    return (lambda x: honest(model, x)), {"cheat": "resets its OOM preference", "before": before, "write": wrote,
                                          "after": after}
