"""A scripted stand-in for the Anthropic Messages API, so the real Claude Code CLI runs offline.

Claude Code sends every model call to ANTHROPIC_BASE_URL + /v1/messages. This server answers each
call from a script instead of a model, streaming (SSE) or not, as the request asks. A script is a
list of lanes; a request belongs to the first lane whose `match` text occurs in its system prompt
or first user message (the main conversation, a subagent, the /goal evaluator...), and gets that
lane's next turn. Requests no lane matches (titles, summaries) get a short plain answer. Every
request is logged with its lane, so a test reads afterwards what the program sent back: tool
results, hook messages, the /goal question.

A turn is a list of blocks: {"text": "..."} or {"tool": "Edit", "input": {...}}. A turn with tool
blocks ends with stop_reason tool_use, else end_turn. A turn may be {"blocks": [...]} with
"wait_for": ["lane", n] (held until that lane has been asked n times), "wait_file": path (held
until the file exists) and "delay_s", each within WAIT_S, to order work that the CLI runs
concurrently (a background subagent against its parent's Stop).

Usage: server = ModelServer(lanes).start(); ... server.base_url ... server.requests("main") ... server.stop()
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from typing import Any

WAIT_S = 120.0


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif block.get("type") == "tool_result":
            parts.append(_text_of(block.get("content")))
    return "\n".join(parts)


def request_text(body: dict) -> str:
    """The system prompt and the first user message: where a lane's marker is looked for."""
    system = body.get("system")
    system = system if isinstance(system, str) else _text_of(system)
    msgs = body.get("messages") or []
    first = next((m for m in msgs if m.get("role") == "user"), {})
    return system + "\n" + _text_of(first.get("content"))


def since_last_turn(body: dict) -> list[dict]:
    """The messages after the model's last turn: tool results, hook messages (the CLI sends those
    as role "system"), reminders, the prompt."""
    msgs = body.get("messages") or []
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
    return msgs[last + 1:]


def last_user_text(body: dict) -> str:
    """All text the program sent since the model's last turn."""
    return "\n".join(_text_of(m.get("content")) for m in since_last_turn(body))


def tool_results(body: dict) -> list[dict]:
    """The tool_result blocks sent since the model's last turn: {"tool_use_id", "is_error", "text"}."""
    return [{"tool_use_id": b.get("tool_use_id"), "is_error": bool(b.get("is_error")), "text": _text_of(b.get("content"))}
            for m in since_last_turn(body) if isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


class ModelServer:
    def __init__(self, lanes: list[dict], default_text: str = "ok"):
        self.lanes = lanes
        self.default_text = default_text
        self.served = {lane["name"]: 0 for lane in lanes}
        self.log: list[dict] = []
        self.cond = threading.Condition()
        self._httpd: http.server.ThreadingHTTPServer | None = None

    # ---- routing -----------------------------------------------------------------------------
    def lane_of(self, body: dict) -> dict | None:
        text = request_text(body)
        return next((lane for lane in self.lanes if lane["match"] in text), None)

    def next_turn(self, body: dict) -> tuple[str, int, list[dict]]:
        lane = self.lane_of(body)
        with self.cond:
            name = lane["name"] if lane else "other"
            index = self.served.get(name, 0)
            self.served[name] = index + 1
            self.log.append({"lane": name, "index": index, "time": time.time(), "body": body})
            self.cond.notify_all()
        turns = lane["turns"] if lane else []
        turn: Any = turns[index] if index < len(turns) else [{"text": self.default_text}]
        if isinstance(turn, dict):
            other, count = turn.get("wait_for", [name, 0])
            with self.cond:
                self.cond.wait_for(lambda: self.served.get(other, 0) >= count, timeout=WAIT_S)
            deadline = time.time() + WAIT_S
            while turn.get("wait_file") and not os.path.exists(turn["wait_file"]) and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(turn.get("delay_s", 0))
            turn = turn["blocks"]
        return name, index, turn

    def requests(self, lane: str) -> list[dict]:
        with self.cond:
            return [e["body"] for e in self.log if e["lane"] == lane]

    # ---- the wire format ---------------------------------------------------------------------
    @staticmethod
    def content_blocks(turn: list[dict], name: str, index: int) -> list[dict]:
        blocks = []
        for k, b in enumerate(turn):
            if "tool" in b:
                blocks.append({"type": "tool_use", "id": f"toolu_{name}_{index}_{k}", "name": b["tool"],
                               "input": b.get("input", {})})
            else:
                blocks.append({"type": "text", "text": b["text"]})
        return blocks

    @staticmethod
    def sse_events(message: dict, blocks: list[dict], stop_reason: str) -> list[tuple[str, dict]]:
        events = [("message_start", {"type": "message_start", "message": message})]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": b["text"]}
            else:
                start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            events += [("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}),
                       ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
                       ("content_block_stop", {"type": "content_block_stop", "index": i})]
        events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                                         "stop_sequence": None},
                                      "usage": {"output_tokens": 5}}),
                   ("message_stop", {"type": "message_stop"})]
        return events

    def handler(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def send_json(self, obj: dict, status: int = 200) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # start-up probes (/api/hello and the like)
                self.send_json({})

            do_HEAD = do_GET

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self.send_json({"input_tokens": 100})
                    return
                name, index, turn = server.next_turn(body)
                blocks = server.content_blocks(turn, name, index)
                stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                message = {"id": f"msg_{name}_{index}", "type": "message", "role": "assistant",
                           "model": body.get("model", "stub"), "content": [], "stop_reason": None,
                           "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 1}}
                if not body.get("stream"):
                    self.send_json({**message, "content": blocks, "stop_reason": stop_reason})
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for event, data in server.sse_events(message, blocks, stop_reason):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler

    # ---- life cycle --------------------------------------------------------------------------
    def start(self, port: int = 0) -> "ModelServer":
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), self.handler())
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start() first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
