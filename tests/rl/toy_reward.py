"""A reward for the CPU end-to-end test of verl's trainer: 1 when the reply mentions `cuda`, else 0.

verl loads it through `reward.custom_reward_function.path=tests/rl/toy_reward.py`; the signature is
the one verl's reward loop calls (`verl/trainer/ppo/reward.py`)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    return 1.0 if "cuda" in solution_str.lower() else 0.0
