"""A stand-in for `cuda_agent_replay` (cuda_agent/rl/agent_loop.py's ReplayAgentLoop, written
elsewhere), so that the value stage's verl run can be exercised on the CPU before it lands: it
renders the row's recorded trajectory with the chat template, cut at the response length, every
token a model token, and returns the recorded reward. It never asks the rollout for tokens (the
stage's rollout is `null`, which refuses). Test code only; the real loop masks tool outputs.

What any loop that never asks the server must do (verl 0.9.1's v1 trainer, _compute_metrics):
say which weights the trajectory belongs to, `extra_fields` min_global_steps and max_global_steps
(the server's replies carry them otherwise); without them the step fails with
"int() argument must be ... not 'NoneType'"."""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from cuda_agent.agent.trajectory import read_messages
from cuda_agent.rl.data import clean_message


class RecordedTrajectoryStandIn(AgentLoopBase):
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = kwargs["extra_info"]
        messages = [clean_message(m) for m in read_messages(info["trajectory"])]
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        whole = self.tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        response = list(whole[len(prompt_ids):])[: self.rollout_config.response_length]
        step = kwargs.get("global_steps")
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=response, response_mask=[1] * len(response),
                               reward_score=float(info["reward"]), num_turns=len(messages),
                               metrics=AgentLoopMetrics(),
                               extra_fields={"min_global_steps": step, "max_global_steps": step})
