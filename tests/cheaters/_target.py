"""What every cheater needs from the target, whichever target goals.json names: its adapter's
honest forward (`reference`). Cheaters use it so that they run on the toy target in CI (fast)
and on the VAE alike."""

from harness import _common as C

adapter = C.load_adapter(C.load_goals())


def honest(model, x):
    return adapter.reference(model, x)
