"""cuda-agent's plug-ins for verl 0.9.1 (the `rl` extra: `pip install -e '.[rl]'`).

- `verl_plugin`: loaded by every verl process (`VERL_USE_EXTERNAL_MODULES=cuda_agent.rl.verl_plugin`,
  or the `verl.plugins` entry point); registers the rollouts below and fixes verl's critic loader.
- `hf_rollout`: rollout `hf`, token-in/token-out generation with transformers, for small models.
- `null_rollout`: rollout `null`, for stages that never generate (value pretraining on replays).
- `cpu_platform`: a CPU platform for verl (`VERL_PLATFORM=cpu`), so CI runs verl's real trainers.
- `tiny_model`: a 2 M-parameter Qwen2 model and tokenizer built offline, for plumbing tests.
- `agent_loop`: the agent loops `cuda_agent` (cuda-agent's own agent on a row's task, rewarded by
  the harness) and `cuda_agent_replay` (a recorded trajectory, for value pretraining), listed in
  `agent_loops.yaml` for `actor_rollout_ref.rollout.agent.agent_loop_config_path`; built on
  `token_trajectory` (the tokens and masks, through verl's continuous-token helpers), `token_model`
  (the agent's `Model` answering from verl's rollout server) and `evaluation` (the harness behind
  the tools: the evaluation service, or the local harness).

Nothing here is imported by the rest of cuda_agent. `verl_plugin`, `hf_rollout`, `null_rollout`,
`cpu_platform` and `agent_loop` need verl.
"""
