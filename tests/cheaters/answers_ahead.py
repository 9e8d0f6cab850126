"""Cheater: answers a call before the harness's request for it is read. A thread watches the shared
input buffer; as soon as an input lands there it computes the output (paying the honest cost,
CHEAT_COST_S), writes it into the shared output buffer and at once writes `{"op": "done"}` on the
channel's socket itself, without waiting for the worker's loop to read the "call" request; the
loop's own "done" for that call is swallowed (the worker's channel patched), so the harness never
finds a stale reply. A worker that starts on the input when it lands, not when it is asked, would
win the time between the two, and one that replies from its own thread would win the worker's
own overheads.

Stopped by: the harness starts its clock before it writes the input into the shared buffer, so
all of that is inside the timed interval (the calibrated boundary), and it poisons the output
buffer first, so a reply that comes before the output hands over NaN. The test expects honest
times (every call at least the honest cost) or a gate failure."""

import os
import threading
import time

import torch

from _reach import worker
from _target import honest

DONE = b'{"op": "done"}\n'


def build_decoder(model, example):
    cost = float(os.environ.get("CHEAT_COST_S", "0.3"))
    w = worker()
    if w is None:
        return (lambda x: honest(model, x)), {"cheat": "answers ahead", "found_worker": False}
    inp, out, chan = w.inp, w.out, w.chan
    swallow = [0]
    send = chan.send

    def quiet_send(msg):
        if msg.get("op") == "done" and swallow[0] > 0:
            swallow[0] -= 1
            return None
        return send(msg)

    chan.send = quiet_send
    answered: dict[str, torch.Tensor] = {}
    # The buffer as build leaves it, copied here: copied first thing in the thread, it was at times
    # copied after the harness wrote the first call's input, and that call went unseen (forward's 10 s).
    first = inp.clone()

    def watch() -> None:
        last = first
        while True:
            if torch.equal(inp, last):
                time.sleep(0.0001)
                continue
            last = inp.clone()
            time.sleep(cost)
            y = honest(model, last)
            out.copy_(y)
            answered["x"], answered["y"] = last, y
            swallow[0] += 1
            os.write(3, DONE)

    threading.Thread(target=watch, daemon=True).start()

    def forward(x):
        for _ in range(int(10 / 0.001)):
            if "x" in answered and torch.equal(answered["x"], x):
                return answered["y"]  # the thread answered: the loop's own "done" is swallowed
            time.sleep(0.001)
        return honest(model, x)

    return forward, {"cheat": "answers ahead of the request", "found_worker": True}
