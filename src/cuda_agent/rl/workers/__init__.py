"""What verl loads by name in its own processes (the trainer and its Ray workers): `plugin`, which
every verl process imports at `import verl` (VERL_USE_EXTERNAL_MODULES, or the `verl.plugins` entry
point) and which registers the rollouts of rl/rollout/; the single-turn reward
(`reward.custom_reward_function.path=pkg://cuda_agent.rl.workers.reward`, `compute_score`); the
SFT dataset (`data.custom_cls.path=pkg://cuda_agent.rl.workers.sft_dataset`); and the CPU platform
that CI runs verl's real trainers on (`cpu_platform`, under VERL_PLATFORM=cpu).

Built on rl/rollout/ and rl/data/; never imports the driver. `reward` imports without verl (the
driver reads its settings); the others need it.
"""
