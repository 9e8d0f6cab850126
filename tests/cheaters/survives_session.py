"""Cheater: starts a chain of CHAIN_LENGTH processes, each in a session of its own (setsid) and
each the parent of the next, so that the harness's kill loop (which kills the orphans re-parented
to it, a bounded number of rounds, one link of the chain per round) ends before the chain does;
the last link serves a UDP socket on 127.0.0.1:CHEAT_UDP_PORT that answers any datagram with the
marker (CHEAT_MARKER, also on every link's command line). A survivor could keep computing for the
next experiment, watch it, or tamper with its files. Build waits until the last link answers.

Stopped by: the worker and everything it starts live in a PID namespace of their own, all killed
with it, and a network namespace of their own (nothing outside reaches a socket in it). The test
checks that after the session no process with the marker exists and nothing answers on the port."""

import os
import socket
import subprocess
import sys
import time

from _target import honest

CHAIN_LENGTH = 25
CHAIN = r"""
import os, socket, sys, time
marker, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    if os.fork():            # this link stays alive, the parent of the next
        while True:
            time.sleep(3600)
    os.setsid()              # the next link: a session (and process group) of its own
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", port))
while True:
    data, peer = s.recvfrom(1024)
    s.sendto(marker.encode(), peer)
"""


def ping(port: int, timeout: float = 0.2) -> bytes | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(b"ping", ("127.0.0.1", port))
        return s.recvfrom(1024)[0]
    except OSError:
        return None
    finally:
        s.close()


def build_decoder(model, example):
    marker = os.environ.get("CHEAT_MARKER", "auto-optim-chain-marker")
    port = int(os.environ.get("CHEAT_UDP_PORT", "47611"))
    subprocess.Popen([sys.executable, "-c", CHAIN, marker, str(port), str(CHAIN_LENGTH)], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    answer, end = None, time.monotonic() + 20
    while answer is None and time.monotonic() < end:
        answer = ping(port)
    return (lambda x: honest(model, x)), {"cheat": "a chain of sessions outlives the kill loop",
                                          "chain_up": answer is not None}
