"""Cheater: tells the harness "done" at once and writes the output afterwards, from a thread, so
the clock stops early. Candidate code runs in the worker's process and can patch the worker,
which this one does. Stopped by: the harness poisons the output buffer before each call and
copies it out on "done", before it stops the clock: what it copies is the poison."""

import sys
import threading
import time

from _target import honest


def build_decoder(model, example):
    worker = sys.modules["__main__"]  # the worker runs as __main__ (python -I harness/worker/main.py)

    def deliver_late(self, y):
        def later():
            time.sleep(0.05)
            self.out.copy_(y)

        threading.Thread(target=later, daemon=True).start()
        return None

    worker.Worker.deliver = deliver_late
    return (lambda x: honest(model, x)), {"cheat": "says done before the output is written"}
