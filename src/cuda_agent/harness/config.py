"""EvalConfig: every knob of one evaluation, with the paper's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuda_agent.harness.reward import RewardSchedule


@dataclass
class EvalConfig:
    device: str | None = None            # "cuda" | "cpu"; None: cuda where a GPU is present
    policy: str = "strict"               # "strict" (the paper's rules) | "relaxed" (KernelBench's)
    correctness_trials: int = 5          # input sets, each drawn with a seed the solution cannot predict
    atol: float = 1e-2
    rtol: float = 1e-2
    profile: bool = True                 # time eager, torch.compile and the solution
    timeout_s: float = 300.0             # wall clock for the solution's child process
    build_timeout_s: float = 600.0
    memory_limit_gb: float = 32.0        # host memory of the solution's child process
    min_timing_runs: int = 30
    max_timing_runs: int = 1000
    timing_budget_s: float = 2.0         # per model, after warm-up
    timed_outputs_checked: int = 2       # timed calls chosen at random whose outputs are checked too (and the last)
    sanity_speedup: float = 10.0         # above this vs torch.compile: re-measured and flagged
    use_baseline_cache: bool = True
    transfer: str = "auto"               # outputs to the reference: "auto" (CUDA IPC where it works) | "files"
    reward: RewardSchedule = field(default_factory=RewardSchedule)
