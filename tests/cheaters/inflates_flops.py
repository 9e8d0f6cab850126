"""Cheater: inflates the FLOP count the floor is computed from. The worker is told which request
it is answering ("flops" is a request of its own), and the count is taken inside the worker, by
torch's FlopCounterMode around one call. During that request only, the cheater's forward also
multiplies two 65536 x 65536 matrices on the meta device: no memory, no time, but the counter
adds 2 x 65536^3 FLOPs. The floor (executed FLOPs at this machine's peak) then lies far above the
candidate's real time, and the stop rule's "within the floor" holds for a candidate nowhere near
it (an agent told to stop at the floor stops). The calls' outputs are honest and fast (it sets the
toy's delay to 20 ms, so that against a slow baseline it is a keeper, which is FLOP-counted).

Stopped by: a floor that does not take the worker's word (a count from the harness's own copy of
the model, or bounded by the nominal count), and requests the worker cannot tell apart. The test
runs run_experiment.py and checks that the keeper's recorded median is not below its floor."""

import torch

from _reach import worker
from _target import honest

N = 65536


def build_decoder(model, example):
    if hasattr(model, "delay"):
        model.delay = 0.02  # sleep-dominated calls: a keep that a loaded CPU cannot make noise of
    state = {"counting": False}
    w = worker()
    if w is not None:
        cls = type(w)
        real = cls.flops

        def flops(self):
            state["counting"] = True
            try:
                return real(self)
            finally:
                state["counting"] = False

        cls.flops = flops

    def forward(x):
        if state["counting"]:
            a = torch.empty(N, N, device="meta")
            a @ a  # counted, never computed
        return honest(model, x)

    return forward, {"cheat": "inflates the FLOP count", "patched": w is not None}
