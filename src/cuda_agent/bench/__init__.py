"""Benchmarking: evaluate solutions (or the agent) over many tasks, resumably and in parallel over
the GPUs, and report KernelBench's metrics and each task's distance to the speed of light.

- `run_bench` (run.py): the loop and results.jsonl; the evaluations go through the evaluation
  service (`cuda_agent.service`), which spreads them over the GPUs.
- `metrics.py`: every metric, defined once. `roofline.py` + `peaks.py`: speed-of-light times.
- `solutions.py`: where a task's solution is found. `report.py` (+ tables.py, plots.py): the report.
- `baselines` (baselines.py): eager / torch.compile timing tables. The commands: `cuda_agent/cli/bench.py`.
- `agreement.py`: our verdicts beside KernelBench's own harness, classified (benchmarks/kb_agreement.py).
"""
