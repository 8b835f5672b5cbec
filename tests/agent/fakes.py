"""Test doubles at the edge of the machine: an HTTP server that speaks the OpenAI chat API from a
script (so the real client code runs), and an evaluator standing in for the harness."""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cuda_agent.harness.result import BuildResult, EvalResult, TimingStats


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


def _timing(ms: float) -> TimingStats:
    return TimingStats(ms, ms, ms, ms, 0.0, 0.0, 30)


@dataclass
class FakeEvaluator:
    """A harness stand-in: model_new.py is correct when it calls `cuda_extension.fast`; profiled, it is
    `speedup` times faster than torch.compile. `delay` slows every action (to be killed mid-way)."""

    workspace: Path
    speedup: float = 1.5
    delay: float = 0.0
    calls: list[str] = field(default_factory=list)

    def compile(self) -> BuildResult:
        self.calls.append("compile")
        time.sleep(self.delay)
        return BuildResult(ok=True, seconds=0.5, compiled=2)

    def evaluate(self, profile: bool) -> EvalResult:
        self.calls.append("profile" if profile else "verify")
        time.sleep(self.delay)
        correct = "cuda_extension.fast" in (self.workspace / "model_new.py").read_text()
        if not correct:
            return EvalResult(task="t", reward=-1.0, correct=False, stage="correctness",
                              reason="output mismatch on input set 1: max abs error 3.2")
        if not profile:
            return EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="correct",
                              milestone="correct", max_abs_error=1e-6)
        return EvalResult(task="t", reward=3.0, correct=True, stage="done", reason="correct",
                          milestone="faster_than_compile", speedup_vs_eager=2 * self.speedup,
                          speedup_vs_compile=self.speedup, eager=_timing(2.0 * self.speedup),
                          compile=_timing(self.speedup), solution=_timing(1.0), max_abs_error=1e-6)


FAST_MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))
        self.bias = nn.Parameter(torch.empty(features))

    def forward(self, x):
        return cuda_extension.fast(x, self.scale, self.bias)
"""


def child_run(out: str, url: str | None = None, policy: str | None = None, delay: float = 0.0) -> None:
    """A run in a child process (to be killed): the fake harness, a model at `url` or a replay."""
    from cuda_agent.agent.config import load_config, override
    from cuda_agent.agent.run import optimize
    from cuda_agent.tasks import EXAMPLES_DIR

    config = override(load_config(), model={"timeout_s": 120.0, "max_retries": 0}, run={"isolation": False})
    optimize(EXAMPLES_DIR / "scale_bias_relu.py", model="m" if url else None, base_url=url, policy=policy,
             device="cpu", out=out, config=config, evaluator=lambda ws, device: FakeEvaluator(ws, delay=delay))
