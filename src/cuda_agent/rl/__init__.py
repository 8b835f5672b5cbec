"""cuda-agent's plug-ins for verl 0.9.1 (the `rl` extra: `pip install -e '.[rl]'`).

- `verl_plugin`: loaded by every verl process (`VERL_USE_EXTERNAL_MODULES=cuda_agent.rl.verl_plugin`,
  or the `verl.plugins` entry point); registers the rollouts below and fixes verl's critic loader.
- `hf_rollout`: rollout `hf`, token-in/token-out generation with transformers, for small models.
- `null_rollout`: rollout `null`, for stages that never generate (value pretraining on replays).
- `cpu_platform`: a CPU platform for verl (`VERL_PLATFORM=cpu`), so CI runs verl's real trainers.
- `tiny_model`: a 2 M-parameter Qwen2 model and tokenizer built offline, for plumbing tests.

Nothing here is imported by the rest of cuda_agent; importing a module other than `tiny_model`
needs verl.
"""
