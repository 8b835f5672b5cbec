"""One conversation as verl's trainer sees it: the prompt's token ids, then the response's ids with
their mask (1: sampled by the policy; 0: everything else, i.e. tool results and the chat template's
glue between turns) and the log-probs of the sampled tokens.

Built only with verl 0.9.1's continuous-token helpers (`AgentLoopBase.ct_build_initial_tokens`,
`ct_merge_assistant_token`, `ct_merge_context_msg`): the prompt is rendered once, each reply's
tokens are appended as the server sampled them (never decoded and encoded again), and each group of
tool results is rendered on its own and appended. The live loop (`CudaAgentLoop`, tokens from the
rollout server) and the replay loop (`ReplayAgentLoop`, recorded messages rendered by the chat
template: `reply_tokens`) share this class, so the same messages give the same tokens and masks.

Append-only: verl renders each appended group without re-reading what came before, so a message
already tokenized must never change. The messages tokenized so far are kept as a copy, and a
conversation whose earlier messages were rewritten (the agent's compaction of old tool outputs,
which RL configs switch off) is refused with `HistoryRewritten`.

The response budget is verl's `rollout.response_length`, counted from the end of the prompt: a
reply is asked for at most the room left (`room`), and tool results that would leave no room are
not added (`add_context` returns False), as verl's own tool loop does. `output` cuts the response
at the budget, as verl's loops do before the trainer pads it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

# a neutral conversation to render one message after (verl renders appended groups the same way)
_PREFIX = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


class HistoryRewritten(RuntimeError):
    """Messages already turned into tokens were changed afterwards; the tokens no longer match them."""


class TokenTrajectory:
    """The tokens of one conversation, grown turn by turn through `loop`'s continuous-token helpers.
    `tools`: the JSON schemas the chat template lists; `log_probs`: keep the sampled log-probs."""

    def __init__(self, loop: Any, tools: list[dict[str, Any]], response_length: int, log_probs: bool):
        self.loop = loop
        self.tools = tools
        self.response_length = response_length
        self.ids: list[int] = []
        self.prompt_length = 0
        self.mask: list[int] = []
        self.log_probs: list[float] | None = [] if log_probs else None
        self.messages: list[dict[str, Any]] = []   # a copy of what the tokens hold

    @property
    def started(self) -> bool:
        return bool(self.ids)

    @property
    def room(self) -> int:
        """Tokens the next reply may have."""
        return self.response_length - len(self.mask)

    async def start(self, messages: list[dict[str, Any]]) -> None:
        """The prompt: `messages` (system and task) rendered with the tools, ready for the first reply."""
        ids = await self.loop.ct_build_initial_tokens(messages, tools=self.tools)
        limit = self.loop.rollout_config.prompt_length
        if len(ids) >= limit:  # verl cuts a long prompt from the left (a warning only): the system prompt would go
            full = self.loop.continuous_token_builder.build_initial_tokens(messages, tools=self.tools)
            if len(full) > limit:
                raise ValueError(f"the first messages take {len(full)} tokens, over rollout.prompt_length={limit}; "
                                 "raise data.max_prompt_length (verl would cut the system prompt from the left)")
        self.ids, self.prompt_length, self.messages = list(ids), len(ids), copy.deepcopy(messages)

    async def add_context(self, messages: list[dict[str, Any]]) -> bool:
        """Append what `messages` holds beyond the tokens (tool results), mask 0. False, adding nothing,
        when it would leave no room for another reply."""
        self._check_prefix(messages)
        if len(messages) == len(self.messages):
            return True
        merge, mask, log_probs = await self.loop.ct_merge_context_msg(
            self.messages, messages, self.ids, self.mask, self.log_probs, tools=self.tools)
        if len(mask) >= self.response_length:
            return False
        self.ids, self.mask, self.log_probs = merge.token_ids, mask, log_probs
        self.messages = copy.deepcopy(messages)
        return True

    async def add_reply(self, token_ids: list[int], log_probs: list[float] | None, message: dict[str, Any]) -> None:
        """Append a reply's tokens as sampled (mask 1, with their log-probs); `message` is what they say."""
        if self.log_probs is not None and log_probs is None and token_ids:
            raise ValueError("the rollout server sent no log-probs although sampling_params asked for them "
                             "(actor_rollout_ref.rollout.calculate_log_probs)")
        merge, mask, kept = await self.loop.ct_merge_assistant_token(
            self.ids, list(token_ids), self.mask, self.log_probs,
            assistant_logprobs=list(log_probs) if self.log_probs is not None and log_probs is not None else None)
        self.ids, self.mask, self.log_probs = merge.token_ids, mask, kept
        self.messages.append(copy.deepcopy(message))

    def reply_tokens(self, message: dict[str, Any]) -> list[int]:
        """The tokens a model that follows the chat template writes for the assistant `message`, up
        to and including its end-of-turn token: what the replay appends where the live loop has the
        server's tokens. Rendered after a neutral prefix, as verl renders appended groups."""
        builder = self.loop.continuous_token_builder
        header = builder.render_delta_token_id(_PREFIX, [], add_generation_prompt=True, tools=self.tools)
        turn = builder.render_delta_token_id(_PREFIX, [for_template(message)], tools=self.tools)
        if turn[:len(header)] != header:
            raise ValueError("the chat template renders an assistant turn that does not start with its generation "
                             "prompt; this replay cannot tell the reply's tokens apart")
        body = turn[len(header):]
        ends = [i for i, t in enumerate(body) if t in end_of_turn_ids(self.loop.tokenizer)]
        return body[:ends[-1] + 1] if ends else body

    def output(self) -> dict[str, Any]:
        """prompt_ids, response_ids, response_mask and response_logprobs for verl's AgentLoopOutput,
        the response cut at the budget."""
        n = self.response_length
        return {"prompt_ids": self.ids[:self.prompt_length], "response_ids": self.ids[self.prompt_length:][:n],
                "response_mask": self.mask[:n],
                "response_logprobs": self.log_probs[:n] if self.log_probs is not None else None}

    def _check_prefix(self, messages: list[dict[str, Any]]) -> None:
        if messages[:len(self.messages)] != self.messages:
            changed = next(i for i, (a, b) in enumerate(zip(self.messages, messages)) if a != b) \
                if len(messages) >= len(self.messages) else len(messages)
            raise HistoryRewritten(f"message {changed} changed after it was turned into tokens; an RL rollout's "
                                   "conversation must be append-only (limits.compact_at must stay above 1)")


def end_of_turn_ids(tokenizer: Any) -> set[int]:
    """The tokens a reply ends with: the tokenizer's eos and, for ChatML templates, `<|im_end|>`."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def for_template(message: dict[str, Any]) -> dict[str, Any]:
    """`message` as chat templates expect it: tool-call arguments as objects (the OpenAI format keeps
    them as JSON text, which Qwen's template would quote a second time)."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    out = dict(message, tool_calls=[])
    for call in calls:
        fn = dict(call.get("function") or {})
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                parsed = json.loads(args)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                fn["arguments"] = parsed
        out["tool_calls"].append(dict(call, function=fn))
    return out
