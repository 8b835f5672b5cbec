"""The agent loop: ask the model, run the tools it calls, record everything, until the model
replies without a tool call or a budget (turns, context, wall clock) runs out."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from cuda_agent.agent.config import AgentConfig
from cuda_agent.llm import Model, ModelError, Usage
from cuda_agent.agent.tools import Tools
from cuda_agent.agent.trajectory import TrajectoryWriter


class ContextFull(Exception):
    """Raised by a model whose conversation has used its whole context budget (an RL rollout counts
    its tokens exactly); the run ends with status `max_context`, as when the loop's estimate says so."""


@dataclass
class Outcome:
    status: str      # done | max_turns | max_seconds | max_context | model_error | interrupted
    turns: int
    usage: Usage
    elapsed: float
    error: str = ""


@dataclass
class Step:
    """What the progress view shows after each action."""

    turn: int
    action: str
    tokens: int
    elapsed: float


class Agent:
    def __init__(self, model: Model, tools: Tools, config: AgentConfig, trajectory: TrajectoryWriter,
                 on_step: Callable[[Step], None] | None = None):
        self.model, self.tools, self.trajectory = model, tools, trajectory
        self.limits, self.prompts = config.limits, config.prompts
        self.on_step = on_step or (lambda step: None)
        self.messages: list[dict[str, Any]] = []
        self.turns = 0
        self.usage = Usage()
        self._start = time.monotonic()
        self._tokens_per_char = 0.25   # until the endpoint's token counts calibrate it

    def run(self, messages: list[dict[str, Any]], turns: int = 0, usage: Usage = Usage(),
            elapsed: float = 0.0) -> Outcome:
        """Continue the conversation `messages` (a new one: system and task; or a resumed one)."""
        self.messages, self.turns, self.usage = messages, turns, usage
        self._start = time.monotonic() - elapsed
        self._answer_interrupted_calls()
        try:
            while not self._finished():
                self._shorten_old_outputs()
                status = self._out_of_budget()
                if status:
                    return self._outcome(status)
                self._step()
            return self._outcome("done")
        except ContextFull:
            return self._outcome("max_context")
        except ModelError as e:
            return self._outcome("model_error", str(e))
        except KeyboardInterrupt:
            return self._outcome("interrupted", "stopped by the user")

    def _step(self) -> None:
        sent_chars = self._chars()
        reply = self.model.query(self.messages, self.tools.schemas)
        self.turns += 1
        self.usage = self.usage + reply.usage
        if reply.usage.prompt_tokens and sent_chars:
            self._tokens_per_char = reply.usage.prompt_tokens / sent_chars
        self._append(reply.message(), usage=reply.usage.to_dict(), seconds=round(reply.seconds, 3))
        if not reply.tool_calls:
            self.on_step(Step(self.turns, "finished", self.usage.total_tokens, self.elapsed))
        for i, call in enumerate(reply.tool_calls):
            start = time.monotonic()
            obs = self.tools.execute(call.name, call.arguments)
            text = obs.text + (self._turns_left_note() if i == len(reply.tool_calls) - 1 else "")
            extra = {"harness": obs.record} if obs.record else {}
            self._append({"role": "tool", "tool_call_id": call.id, "content": text},
                         seconds=round(time.monotonic() - start, 3), **extra)
            self.on_step(Step(self.turns, obs.summary, self.usage.total_tokens, self.elapsed))

    def _finished(self) -> bool:
        last = self.messages[-1]
        return last["role"] == "assistant" and not last.get("tool_calls")

    def _out_of_budget(self) -> str | None:
        if self.turns >= self.limits.max_turns:
            return "max_turns"
        if self.elapsed >= self.limits.max_seconds:
            return "max_seconds"
        if self._context_tokens() > self.limits.max_context_tokens:
            return "max_context"
        return None

    def _shorten_old_outputs(self) -> None:
        """Past `compact_at` of the context, old tool outputs keep only their head and tail, oldest first."""
        if self._context_tokens() <= self.limits.compact_at * self.limits.max_context_tokens:
            return
        keep = self.limits.shortened_output_chars
        old_outputs = [m for m in self.messages if m["role"] == "tool"][:-self.limits.keep_recent_outputs or None]
        for m in old_outputs:
            text = m["content"]
            if len(text) > 2 * keep:
                omitted = len(text) - keep
                m["content"] = text[:keep // 2] + self.prompts.shortened.format(omitted=omitted) + text[-(keep // 2):]
                if self._context_tokens() <= self.limits.compact_at * self.limits.max_context_tokens:
                    return

    def _answer_interrupted_calls(self) -> None:
        """A resumed run may stop between a model's calls and their results: every call gets an answer."""
        last = max((i for i, m in enumerate(self.messages) if m["role"] == "assistant"), default=None)
        if last is None:
            return
        answered = {m.get("tool_call_id") for m in self.messages[last + 1:] if m["role"] == "tool"}
        for call in self.messages[last].get("tool_calls") or []:
            if call["id"] not in answered:
                self._append({"role": "tool", "tool_call_id": call["id"], "content": self.prompts.interrupted})

    def _turns_left_note(self) -> str:
        left = self.limits.max_turns - self.turns
        return self.prompts.turns_left.format(left=left) if 0 < left <= self.limits.turns_left_warning else ""

    def _append(self, message: dict[str, Any], **info: Any) -> None:
        self.messages.append(message)
        self.trajectory.write("message", turn=self.turns, elapsed=round(self.elapsed, 3), message=message, **info)

    def _chars(self) -> int:
        return sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls", []))) for m in self.messages)

    def _context_tokens(self) -> int:
        return int(self._chars() * self._tokens_per_char)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def _outcome(self, status: str, error: str = "") -> Outcome:
        return Outcome(status, self.turns, self.usage, self.elapsed, error)
