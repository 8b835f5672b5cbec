"""A scripted stand-in for verl's LLMServerClient (the edge of the machine: the policy's GPU server),
importable by name so that a Ray worker can unpickle it.

It answers each task with scripted replies, one per assistant turn, tokenized as a model that
follows the chat template would emit them (the text, then its end-of-turn token), cut at the
request's `max_tokens` as a real server cuts them, with a fixed log-prob per token and the weights
version in `extra_fields` as verl's servers send it. Stateless: the task is read from the prompt's
task message and the turn from the assistant turns the prompt holds, so trajectories can run at once.
"""

from __future__ import annotations

import re
from typing import Any

from verl.workers.rollout.replica import TokenOutput

LOG_PROB = -0.25
GLOBAL_STEPS = 7
_PREFIX = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


def template_reply(tokenizer: Any, message: dict[str, Any], tools: list[dict[str, Any]]) -> str:
    """The text a model following the chat template writes for the assistant `message`, up to and
    including `<|im_end|>`."""
    from cuda_agent.rl.rollout.token_trajectory import for_template

    head = tokenizer.apply_chat_template(_PREFIX, tools=tools, add_generation_prompt=True, tokenize=False)
    turn = tokenizer.apply_chat_template(_PREFIX + [for_template(message)], tools=tools, tokenize=False)
    assert turn.startswith(head)
    body = turn[len(head):]
    return body[:body.rindex("<|im_end|>") + len("<|im_end|>")]


class ScriptedServer:
    """`generate` as LLMServerClient has it; `scripts`: task name -> reply texts, in turn order."""

    def __init__(self, model_path: str, scripts: dict[str, list[str]]):
        self.model_path = model_path
        self.scripts = scripts
        self._tokenizer = None

    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        return self._tokenizer

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        tok = self.tokenizer()
        prompt = tok.decode(prompt_ids)
        task = re.search(r"Make `(\w+)` fast", prompt)[1]
        turn = prompt.count("<|im_start|>assistant") - 1
        replies = self.scripts[task]
        text = replies[turn] if turn < len(replies) else "Nothing more to do.<|im_end|>"
        ids = tok.encode(text, add_special_tokens=False)[:sampling_params.get("max_tokens")]
        return TokenOutput(token_ids=ids, log_probs=[LOG_PROB] * len(ids) if sampling_params.get("logprobs") else None,
                           stop_reason="completed", extra_fields={"global_steps": GLOBAL_STEPS})
