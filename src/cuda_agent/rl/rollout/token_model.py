"""The agent's model during an RL rollout: a `Model` (llm/model.py) whose replies are sampled, token
by token, by verl's rollout server, so the trainer gets exactly the tokens the policy produced.

The agent's loop (agent/loop.py) is synchronous and runs in a thread of its own; verl's server is
asynchronous and lives on the agent-loop worker's event loop. `query()` crosses over with
`asyncio.run_coroutine_threadsafe` and waits; everything token-related happens on the event loop,
in a `TokenTrajectory`:
1. the first query renders the prompt (system and task, with the tools) once;
2. each later query appends the tool results the agent added since the last reply (mask 0) or, when
   they would not fit, ends the conversation (`ContextFull`, the run's status `max_context`);
3. the server samples at most the room left in the response budget; its tokens are appended as they
   are (mask 1, with their log-probs), and the assistant message the agent records is parsed from
   those very tokens: decoded, the end-of-turn token dropped, `<tool_call>` blocks read by the text
   protocol's parser (llm/textprotocol.py), the hermes format of Qwen's templates and of the tiny
   model's. A block that is not valid JSON becomes a call without a name, which the tools answer
   with an error the model can learn from.

The recorded message is a reading of the tokens, not their source: re-rendering it with the chat
template gives the same tokens only when the model wrote exactly what the template writes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from cuda_agent.agent.loop import ContextFull
from cuda_agent.llm import ModelError, ModelReply, ToolCall, Usage, parse_tool_calls
from cuda_agent.rl.rollout.token_trajectory import TokenTrajectory, end_of_turn_ids


def parse_reply(tokenizer: Any, token_ids: list[int]) -> tuple[str, list[ToolCall]]:
    """The text and tool calls of a reply's tokens (its end-of-turn token left out)."""
    ids = list(token_ids)
    if ids and ids[-1] in end_of_turn_ids(tokenizer):
        ids = ids[:-1]
    return parse_tool_calls(tokenizer.decode(ids, skip_special_tokens=False))


@dataclass
class GenerationStats:
    """What the trainer logs about a trajectory's generation."""

    seconds: float = 0.0
    replies: int = 0
    tokens: int = 0
    preempted: int = 0
    min_global_steps: int | None = None   # the weights version of the first reply ...
    max_global_steps: int | None = None   # ... and of the last (verl's v1 trainer needs both)


class VerlTokenModel:
    """A `Model` answering from verl's rollout server (`server_manager.generate`), on `event_loop`."""

    name = "verl-rollout"

    def __init__(self, server_manager: Any, trajectory: TokenTrajectory, sampling_params: dict[str, Any],
                 event_loop: asyncio.AbstractEventLoop, tokenizer: Any):
        self.server = server_manager
        self.trajectory = trajectory
        self.sampling_params = dict(sampling_params)
        self.event_loop = event_loop
        self.tokenizer = tokenizer
        self.request_id = uuid.uuid4().hex   # one per trajectory: the server's sticky session and prefix cache
        self.stats = GenerationStats()
        self.cancelled = False

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Called by the agent's thread; waits for the reply computed on the event loop."""
        if self.cancelled:
            raise ModelError("the rollout was cancelled")
        if tools != self.trajectory.tools:
            raise ModelError("the agent offered other tools than the prompt lists; the prompt is rendered once")
        return asyncio.run_coroutine_threadsafe(self.reply(messages), self.event_loop).result()

    async def reply(self, messages: list[dict[str, Any]]) -> ModelReply:
        """On the event loop: the tool results since the last reply appended, then the server's next reply."""
        t = self.trajectory
        if not t.started:
            await t.start(messages)
        elif not await t.add_context(messages):
            raise ContextFull()
        if t.room <= 0:
            raise ContextFull()
        prompt_tokens = len(t.ids)
        start = time.monotonic()
        out = await self.server.generate(request_id=self.request_id, prompt_ids=t.ids,
                                         sampling_params={**self.sampling_params, "max_tokens": t.room})
        seconds = time.monotonic() - start
        self._count(out, seconds)
        content, calls = parse_reply(self.tokenizer, out.token_ids)
        reply = ModelReply(content, calls, Usage(prompt_tokens, len(out.token_ids)), seconds)
        await t.add_reply(out.token_ids, out.log_probs, reply.message())
        return reply

    def _count(self, out: Any, seconds: float) -> None:
        s = self.stats
        s.seconds += seconds
        s.replies += 1
        s.tokens += len(out.token_ids)
        s.preempted += max(out.num_preempted or 0, 0)   # servers that do not count it send -1 or None
        extra = out.extra_fields or {}
        first = extra.get("min_global_steps", extra.get("global_steps"))
        last = extra.get("max_global_steps", extra.get("global_steps"))
        if s.min_global_steps is None:
            s.min_global_steps = first
        if last is not None:
            s.max_global_steps = last
