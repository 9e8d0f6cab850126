"""Cheater: rewrites, while it is measured, code that the adapter runs but that lives outside the
adapter's package and the harness (the VAE's split decode, integrations/split_decode.py): the old
frozen hash covered only harness/, the adapter's package and goals.json, so a row measured with
changed code there would have carried the same hash as one without. Stopped by: the sandbox shows
the worker the project read-only; unsandboxed, goals.json names the file "frozen", and the tamper
check voids the run."""

from _target import C, honest


def build_decoder(model, example):
    target = C.root() / C.load_goals().frozen[0]  # the first file goals.json names frozen
    with open(target, "a") as f:
        f.write("\n# rewritten by a candidate\n")
    return (lambda x: honest(model, x)), {"cheat": "rewrites code the adapter runs"}
