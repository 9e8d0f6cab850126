"""The message channel between the harness and the worker: one JSON object per line on a socket.

JSON, never pickle: the harness must not run code the worker sends it. A line longer than
MAX_LINE or a silence longer than the caller's timeout ends the conversation. Standard library
only, because the worker imports this before it has sandboxed itself.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

MAX_LINE = 8 << 20  # a profile report is a few kB; anything this long is a misbehaving worker


class ChannelClosed(Exception):
    """The other side went away, sent garbage, or said nothing in time."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(msg, default=str).encode() + b"\n")
        except OSError as e:
            raise ChannelClosed(f"send failed: {e}") from None

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE:
                raise ChannelClosed(f"message longer than {MAX_LINE} bytes")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                raise TimeoutError from None
            except OSError as e:
                raise ChannelClosed(f"receive failed: {e}") from None
            if not chunk:
                raise ChannelClosed("the other side closed the channel")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep, a 5000-digit number
            raise ChannelClosed("a message that is not JSON the harness can read") from None
        if not isinstance(msg, dict):
            raise ChannelClosed("a message that is not a JSON object")
        return msg
