"""A test double at the edge of the machine: an HTTP server that speaks the OpenAI chat API from a
script, so the real client code runs against it."""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


def reply(content: str = "", *calls: tuple[str, Any], prompt_tokens: int = 100,
          completion_tokens: int = 20) -> dict[str, Any]:
    """A scripted answer: text and tool calls (name, arguments as a dict, or as raw text)."""
    tool_calls = [{"id": f"call_{next(_ids)}", "type": "function",
                   "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                  for name, args in calls]
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"status": 200, "body": {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}}}


def error(status: int, message: str = "error", headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {"status": status, "headers": headers or {}, "body": {"error": {"message": message, "type": "x"}}}


def slow(seconds: float, then: dict[str, Any]) -> dict[str, Any]:
    """Answer `then`, but only after `seconds` (longer than the client's timeout: a read timeout)."""
    return {**then, "delay": seconds}


class ChatServer:
    """POST /v1/chat/completions answered from `script`, in order; every request body is kept."""

    def __init__(self, script: list[dict[str, Any]]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                    entry = server.script.pop(0) if server.script else error(500, "script exhausted")
                time.sleep(entry.get("delay", 0))
                data = json.dumps(entry["body"]).encode()
                try:
                    self.send_response(entry["status"])
                    for k, v in {"Content-Type": "application/json", **entry.get("headers", {})}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "ChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
