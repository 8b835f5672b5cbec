"""cuda-agent's plug-ins for verl 0.9.1 (the `rl` extra: `pip install -e '.[rl]'`).

- `verl_plugin`: loaded by every verl process (`VERL_USE_EXTERNAL_MODULES=cuda_agent.rl.verl_plugin`,
  or the `verl.plugins` entry point); registers the rollouts below and fixes verl's critic loader.
- `hf_rollout`: rollout `hf`, token-in/token-out generation with transformers, for small models
  (its token server: `hf_server`).
- `null_rollout`: rollout `null`, for stages that never generate (value pretraining on replays).
- `cpu_platform`: a CPU platform for verl (`VERL_PLATFORM=cpu`), so CI runs verl's real trainers.
- `tiny_model`: a 2 M-parameter Qwen2 model and tokenizer built offline, for plumbing tests.
- `agent_loop`: the agent loops `cuda_agent` (cuda-agent's own agent on a row's task, rewarded by
  the harness) and `cuda_agent_replay` (a recorded trajectory, for value pretraining), listed in
  `agent_loops.yaml` for `actor_rollout_ref.rollout.agent.agent_loop_config_path`; built on
  `token_trajectory` (the tokens and masks, through verl's continuous-token helpers), `token_model`
  (the agent's `Model` answering from verl's rollout server) and `evaluation` (the harness behind
  the tools and the reward: the evaluation service, and RL's one timing plan).

The training side (`cuda-agent train`, cli/train.py):
- `data`: tasks -> verl RL Parquet (single-turn or the agent's prompts), the held-out split,
  KernelBench kept out; SFT rows; `sft_dataset`: verl's SFT dataset for them.
- `reward`: the single-turn reward (`compute_score`), the harness through the evaluation service.
- `rft`: the rejection fine-tuning filter; `sanity`: the learning sanity family.
- `stages` (the run file, the stages, overrides), `launch` (running verl, merging checkpoints;
  `verl_process`: verl's process group, its log and signals),
  `train` (the stages in order, the stage journal), `metrics` (metrics JSONL, plots).
- `config/`: the stage configs (Hydra, over verl's own), `prompts.toml`, `sanity_kernels/`.

Nothing here is imported by the rest of cuda_agent but the CLI. The training side's modules import
without verl (they import it where they use it); `verl_plugin`, `hf_rollout`, `hf_server`, `null_rollout`,
`cpu_platform`, `agent_loop` and `sft_dataset` need it.
"""
