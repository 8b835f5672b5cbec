"""The replay policy: re-issues a recorded run's tool calls, without any LLM (`--policy replay:FILE`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuda_agent.llm import ModelReply, ToolCall
from cuda_agent.agent.trajectory import read_messages
from cuda_agent.usage import UsageError

END_OF_RECORDING = "(The recorded run ends here.)"


class ReplayModel:
    """Answers with the recorded assistant messages in order. The position is the number of assistant
    messages already in the conversation, so a resumed run picks up where it stopped."""

    def __init__(self, path: str | Path):
        path = Path(path)
        self.replies = [m for m in read_messages(path) if m.get("role") == "assistant"]
        if not self.replies:
            raise UsageError(f"{path}: no assistant messages to replay; give a trajectory.jsonl of a run")
        self.name = f"replay:{path.name}"

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        i = sum(1 for m in messages if m.get("role") == "assistant")
        if i >= len(self.replies):
            return ModelReply(END_OF_RECORDING)
        m = self.replies[i]
        return ModelReply(m.get("content") or "", [ToolCall.from_message(c) for c in m.get("tool_calls") or []])
