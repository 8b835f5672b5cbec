"""A minimal OpenAI-compatible chat endpoint for a small Hugging Face model on the CPU, to measure
how the agent's loop treats a small real model (issue 26: SmolLM2-135M-Instruct). A measurement aid,
not product code: the standard library's HTTP server and transformers, one request at a time.

    python benchmarks/smollm2_server.py --model /tmp/est/smollm2 --port 8011
    cuda-agent optimize scale_bias_relu --model smollm2 --base-url http://127.0.0.1:8011/v1 --device cpu

POST /v1/chat/completions renders the messages with the model's own chat template (SmolLM2's has
no tools: `tools` in a request are accepted and not shown to the model, as a server without a tool
template does), decodes greedily (the same replies before and after a change), and answers with
the text; the agent's client finds `<tool_call>` blocks in it. Replies are at most --max-tokens.
GET /v1/models lists the one model.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


class ChatModel:
    def __init__(self, path: str, max_tokens: int):
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.max_tokens = max_tokens
        self.lock = threading.Lock()

    def complete(self, request: dict[str, Any]) -> tuple[str, int, int]:
        """The reply's text, the prompt's tokens and the reply's tokens."""
        messages = [_plain(m) for m in request["messages"]]
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                 return_dict=True)["input_ids"]
        limit = min(int(request.get("max_tokens") or self.max_tokens), self.max_tokens)
        with self.lock, torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=limit,
                                      do_sample=False, pad_token_id=self.tokenizer.eos_token_id)
        reply = out[0, ids.shape[1]:]
        return self.tokenizer.decode(reply, skip_special_tokens=True), ids.shape[1], reply.shape[0]


def _plain(m: dict[str, Any]) -> dict[str, str]:
    """A message as the template wants it: text content; an assistant's earlier calls as <tool_call> blocks."""
    content = m.get("content") or ""
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content)
    for call in m.get("tool_calls") or []:
        fn = call["function"]
        args = fn["arguments"] or "{}"
        content += f'\n<tool_call>\n{{"name": {json.dumps(fn["name"])}, "arguments": {args}}}\n</tool_call>'
    return {"role": m["role"], "content": content}


def serve(chat: ChatModel, name: str, port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "local"}]})

        def do_POST(self) -> None:  # noqa: N802
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            start = time.monotonic()
            text, prompt, completion = chat.complete(request)
            print(f"{time.strftime('%H:%M:%S')} prompt {prompt} tokens, reply {completion} tokens, "
                  f"{time.monotonic() - start:.1f} s: {text[:100]!r}", flush=True)
            self._send(200, {
                "id": f"chatcmpl-{int(time.time() * 1000)}", "object": "chat.completion", "created": int(time.time()),
                "model": name, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                            "finish_reason": "stop" if completion < chat.max_tokens else "length"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}})

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    print(f"serving {name} on http://127.0.0.1:{port}/v1", flush=True)
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="/tmp/est/smollm2", help="a Hugging Face model folder")
    p.add_argument("--name", default="smollm2", help="the name the endpoint serves")
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--max-tokens", type=int, default=256, help="the longest reply")
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    serve(ChatModel(args.model, args.max_tokens), args.name, args.port)


if __name__ == "__main__":
    main()
