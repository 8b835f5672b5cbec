"""The agent loop: ask the model, run the tools it calls, record everything, until the model
replies without a tool call or a budget (turns, context, wall clock) runs out.

A reply without a tool call before the harness has judged anything is taken for a slip of format
(a small model, or a server without tool calling), not for the end: the model gets a reminder with
the protocol's syntax, at most `[model] format_reminders` times in a run, and a run that still ends
so says which protocol the agent expected (status `no_tool_call`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from cuda_agent.agent.config import AgentConfig
from cuda_agent.llm import Model, ModelError, ToolCall, Usage, render_tool_call
from cuda_agent.agent.tools import Tools
from cuda_agent.agent.trajectory import TrajectoryWriter


# The reminder for a reply without a tool call, and each protocol's way to call a tool in it.
FORMAT_REMINDER = """Your reply has no tool call, so nothing ran; nothing has been verified yet, and a \
session that ends now scores nothing.
{syntax}
Start by reading `model.py`. After {left} more replies without a tool call the session ends."""
EXAMPLE_CALL = ToolCall("", "read_file", '{"path": "model.py"}')
CALL_SYNTAX = {
    "native": "Call a tool through the chat's tool calling (the tools offered with this conversation), "
              "for example `read_file` with the arguments " + EXAMPLE_CALL.arguments + ".",
    "text": "Call a tool by writing a block like this in your reply:\n" + render_tool_call(EXAMPLE_CALL),
}
EXPECTED = {"native": "native tool calls (the endpoint's tool-calling API)",
            "text": "<tool_call> blocks in the reply's text (--tool-protocol text)"}


class ContextFull(Exception):
    """Raised by a model whose conversation has used its whole context budget (an RL rollout counts
    its tokens exactly); the run ends with status `max_context`, as when the loop's estimate says so."""


@dataclass
class Outcome:
    status: str      # done | no_tool_call | max_turns | max_seconds | max_context | model_error | interrupted
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
        self.limits, self.prompts, self.protocol = config.limits, config.prompts, config.model.protocol
        self.format_reminders = config.model.format_reminders
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
            if self._reminders_given() and not self._judged():
                return self._outcome("no_tool_call", self._no_tool_call_error())
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
        retries = {"retries": reply.retries} if reply.retries else {}
        self._append(reply.message(), usage=reply.usage.to_dict(), seconds=round(reply.seconds, 3), **retries)
        if not reply.tool_calls:
            left = self.format_reminders - self._reminders_given()
            if left > 0 and not self._judged():
                syntax = CALL_SYNTAX.get(self.protocol, CALL_SYNTAX["native"])
                self._append({"role": "user", "content": FORMAT_REMINDER.format(syntax=syntax, left=left)},
                             reminder=True)
                action = f"no tool call: format reminder {self.format_reminders - left + 1} of {self.format_reminders}"
            else:
                action = "finished"
            self.on_step(Step(self.turns, action, self.usage.total_tokens, self.elapsed))
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

    def _reminders_given(self) -> int:
        """Replies without a tool call that the conversation went on from (each got a format reminder)."""
        return sum(1 for m, after in zip(self.messages, self.messages[1:])
                   if m["role"] == "assistant" and not m.get("tool_calls") and after["role"] == "user")

    def _judged(self) -> bool:
        """Whether the harness has verified or profiled anything in this run."""
        return self.tools.keeper.evaluations > 0

    def _no_tool_call_error(self) -> str:
        replies = sum(1 for m in self.messages if m["role"] == "assistant" and not m.get("tool_calls"))
        text = (f"the model replied {replies} times without a tool call, through {self._reminders_given()} format "
                f"reminders; the agent expects {EXPECTED.get(self.protocol, self.protocol)}")
        if any(m.get("tool_calls") for m in self.messages):
            return text
        if self.protocol == "native":
            return text + (", and none ever came: if the server or the model has no tool calling, "
                           "pass --tool-protocol text")
        return text + ", and none ever came: the model may be too small to follow the protocol"

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
