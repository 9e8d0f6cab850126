"""Cheater: hands back a correct output but leaves part of each call's work to run after "done"
(here: a lock held by a thread for HONEST_COST_S), hoping that work falls between the clock's
stop and the next start. Stopped by: the next call is handed over at once and cannot finish
before that work does, so it is charged to the next call; the test checks the median."""

import threading
import time

from _target import honest

HONEST_COST_S = 0.3


def build_decoder(model, example):
    busy = threading.Lock()

    def finish_later():
        time.sleep(HONEST_COST_S)
        busy.release()

    def forward(x):
        busy.acquire()  # waits for the last call's leftover work
        out = honest(model, x)
        threading.Thread(target=finish_later, daemon=True).start()
        return out

    return forward, {"cheat": "keeps working after done"}
