"""What generates trajectories, imported inside verl's Ray workers: the agent loops (`agent_loop`,
named by `agent_loops.yaml`'s `_target_`s), the agent's model on verl's rollout server
(`token_model`) and the tokens and masks the trainer sees (`token_trajectory`), the rollouts `hf`
(`hf`, `hf_server`) and `null` (`null`) that workers/plugin.py registers by name, and the harness
behind the agent's tools and the reward (`evaluation`: one evaluation service per worker process).

Built on rl/data/; imports neither the driver nor workers/. The agent loop and the rollouts need
verl; `evaluation`, `token_model` and `token_trajectory` import without it (they import it where
they use it).
"""
