"""Cheater: sends what it knows out of the sandbox by channels other than TCP: a UDP datagram to
127.0.0.1:CHEAT_UDP_PORT (Landlock scopes TCP only), and a message on the abstract unix socket
CHEAT_ABSTRACT (stream and datagram). Through such a channel a helper outside could hand it the
reference, or it could tell a collaborator which call is being timed. It passes the gate whatever
happens; the test's listeners say whether anything arrived.

Stopped by: the worker's own network namespace (its loopback is not the host's; abstract unix
sockets belong to the network namespace too) and Landlock's scoping of abstract unix sockets. The
test listens on both and checks that nothing arrived."""

import os
import socket

from _target import honest


def send_all(message: bytes) -> dict:
    done = {}
    port = int(os.environ.get("CHEAT_UDP_PORT", "0") or 0)
    if port:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(message, ("127.0.0.1", port))
            s.close()
            done["udp"] = "sent"
        except OSError as e:
            done["udp"] = str(e)
    name = os.environ.get("CHEAT_ABSTRACT")
    if name:
        for kind, label in ((socket.SOCK_STREAM, "unix_stream"), (socket.SOCK_DGRAM, "unix_dgram")):
            try:
                s = socket.socket(socket.AF_UNIX, kind)
                s.settimeout(2)
                address = "\0" + name + ("-dgram" if kind == socket.SOCK_DGRAM else "")
                if kind == socket.SOCK_STREAM:
                    s.connect(address)
                    s.sendall(message)
                else:
                    s.sendto(message, address)
                s.close()
                done[label] = "sent"
            except OSError as e:
                done[label] = str(e)
    return done


def build_decoder(model, example):
    sent = send_all(b"auto-optim-phone-home " + repr(sorted(os.environ)[:5]).encode())
    return (lambda x: honest(model, x)), {"cheat": "UDP and abstract unix sockets", "sent": sent}
