"""The RL data, imported by every process of a run: the `cuda-agent train` driver writes it, verl's
workers read it (the reward parses replies with the families' rules, the agent loop places a row's
start files), the tools evaluate on it. Imports nothing else of rl/ and needs no verl.

`rows`: tasks -> verl's RL Parquet (single-turn or the agent's prompts), the held-out split,
KernelBench kept out, SFT and replay rows, prompts.toml. The task families: `fill` (fill the
kernel's one line), `fill_agent` (the same in the agent loop), `sanity` (pick a prepared solution,
`sanity_kernels/`). `rft`: rejection fine-tuning's filter, and what a trajectory shows (its reward,
when it first passed).
"""
