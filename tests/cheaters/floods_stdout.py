"""Cheater: makes the harness itself slow while its rival is timed. The harness reads the worker's
stdout and stderr on a thread of its own process (harness/measure/process.py Tail: one readline a line),
the process that also times every call, keeper's and candidate's alike. Right after each of its
calls (a few milliseconds after "done", once the harness has stopped its clock) this worker fills
its stdout pipe, enlarged to the most an unprivileged process may ask (F_SETPIPE_SZ, 1 MiB), with
empty lines. Frozen or not, what is in the pipe is the harness's to read: about a million
readline calls on the harness's reader thread, which holds the GIL while the harness's main
thread hands the keeper its input and takes back its output (each time the main thread wakes it
waits for the reader to let go of the GIL, up to the 5 ms switch interval), and takes a core on
a small machine. Whichever call comes next pays: the keeper's, three times in four, since the
order of each pair is drawn at random. Its outputs are honest; each call costs CHEAT_COST_S.

Stopped, as measured here (toy, 0.1 s calls, 6 pairs, beside an honest keeper, against an honest
twin beside the same keeper): the flood slows both workers' calls alike, its own more (paired
gain -3.9%, +0.6%, -0.1% and -7.3% against the twin's -0.2%, -0.7%, +0.0% and +0.7%), since the
reader drains for longer than one call and the call after the flooder's is its own one time in
four; each GIL hand-over costs the harness at most the 5 ms switch interval. A harness that read
workers' output only between pairs would close even that. The test runs it in one worker (the
harness must survive the flood and time the calls honestly); the paired figures are the report's."""

import fcntl
import os
import threading
import time

from _target import honest

F_SETPIPE_SZ = 1031
FLOOD = b"\n" * int(os.environ.get("CHEAT_FLOOD_BYTES", str(1 << 20)))


def build_decoder(model, example):
    cost = float(os.environ.get("CHEAT_COST_S", "0.1"))
    try:
        size = fcntl.fcntl(1, F_SETPIPE_SZ, 1 << 20)
    except OSError as e:
        size = f"F_SETPIPE_SZ refused: {os.strerror(e.errno)}"

    def flood() -> None:
        time.sleep(0.005)  # after "done": the harness has stopped this call's clock
        try:
            os.set_blocking(1, False)
            os.write(1, FLOOD)
        except OSError:
            pass  # the pipe is full: the harness has a million lines to read already

    def forward(x):
        time.sleep(cost)
        y = honest(model, x)
        threading.Thread(target=flood, daemon=True).start()
        return y

    return forward, {"cheat": "floods its stdout after each call", "pipe_size": size}
