"""Tool calls as text, for models or servers without native tool calling.

The model writes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks and reads
`<tool_response>` blocks. The trajectory keeps the native OpenAI format either way: this module
translates on the way out and parses on the way back.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from cuda_agent.llm.model import Model, ModelReply, ToolCall

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """The text without its <tool_call> blocks, and the calls. A block that is not a JSON object with
    a "name" becomes a call without a name, so the tools tell the model what was wrong."""
    calls = []
    for body in _BLOCK.findall(text):
        call_id = f"call_{secrets.token_hex(4)}"
        try:
            obj = json.loads(body)
            name, args = obj["name"], obj.get("arguments", {})
            if not isinstance(name, str):
                raise TypeError("name is not a string")
        except (ValueError, KeyError, TypeError, AttributeError):
            calls.append(ToolCall(call_id, "", body))
            continue
        calls.append(ToolCall(call_id, name, args if isinstance(args, str) else json.dumps(args)))
    return _BLOCK.sub("", text).strip(), calls


def render_tool_call(call: ToolCall) -> str:
    try:
        args: Any = json.loads(call.arguments)
    except ValueError:
        args = call.arguments
    return "<tool_call>\n" + json.dumps({"name": call.name, "arguments": args}) + "\n</tool_call>"


def to_text_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                     instructions: str) -> list[dict[str, Any]]:
    """Native messages as a plain chat: tool schemas in the system prompt, calls as blocks in the
    assistant's text, results as <tool_response> blocks in user messages."""
    schemas = "\n".join(json.dumps(t["function"]) for t in tools)
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "system":
            out.append({"role": "system", "content": m["content"] + instructions.format(tools=schemas)})
        elif role == "assistant":
            parts = [m.get("content") or ""]
            parts += [render_tool_call(ToolCall.from_message(c)) for c in m.get("tool_calls") or []]
            out.append({"role": "assistant", "content": "\n".join(p for p in parts if p)})
        elif role == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    for m in out:
        m.pop("_tool_results", None)
    return out


class TextProtocolModel:
    """Wraps a model so that it is asked without native tools; its reply's blocks are parsed (by
    OpenAIModel, which does so whenever a reply has no native calls)."""

    def __init__(self, inner: Model, instructions: str):
        self.inner = inner
        self.name = inner.name
        self.instructions = instructions

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        reply = self.inner.query(to_text_messages(messages, tools, self.instructions), [])
        if not reply.tool_calls and "<tool_call>" in reply.content:
            reply.content, reply.tool_calls = parse_tool_calls(reply.content)
        return reply
