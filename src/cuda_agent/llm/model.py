"""The model side of the agent's loop: the `Model` protocol and its reply type. Every policy
(an OpenAI-compatible endpoint, the text protocol, a replayed run, the RL trainer's token server)
answers `query(messages, tools)` with a `ModelReply`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class ModelError(RuntimeError):
    """The endpoint could not give a reply (misconfigured, refused, or still failing after retries)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it; the tools parse it and report what is wrong

    def to_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_message(cls, d: dict[str, Any]) -> "ToolCall":
        fn = d.get("function") or {}
        args = fn.get("arguments", "")
        return cls(id=d.get("id") or "", name=fn.get("name") or "",
                   arguments=args if isinstance(args, str) else json.dumps(args))


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class ModelReply:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    retries: list[str] = field(default_factory=list)  # what failed before this reply came, one line each

    def message(self) -> dict[str, Any]:
        """The reply as an OpenAI assistant message."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in self.tool_calls]
        return msg


class Model(Protocol):
    name: str

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """The next assistant reply to `messages` (OpenAI format), offered the `tools` (JSON schemas)."""
        ...
