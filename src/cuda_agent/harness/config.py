"""EvalConfig: every knob of one evaluation, with the paper's defaults; TimingPlan: how a model is
timed, the one description every caller (evaluate, bench, synth, the agent) passes around."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cuda_agent.harness.reward import RewardSchedule

FLUSHES = ("read", "write")


@dataclass(frozen=True)
class TimingPlan:
    """How many timed calls, for how long, after what warm-up. Baselines are cached per plan (see
    baselines.cache_key), so two callers with the same plan share the same eager and torch.compile
    figures."""

    min_runs: int = 30
    max_runs: int = 1000
    budget_s: float = 2.0        # seconds of timed calls per model, after warm-up
    warmup_s: float = 0.1
    min_warmup: int = 3
    # How the cache is emptied before each call: "read" reads a buffer twice the L2's size (the L2
    # then holds clean lines, dropped for free); "write" zeroes it, as triton's do_bench does, which
    # leaves dirty lines that the timed call pays to write back.
    flush: str = "read"

    def __post_init__(self) -> None:
        if not 1 <= self.min_runs <= self.max_runs:
            raise ValueError(f"timing plan: need 1 <= min_runs ({self.min_runs}) <= max_runs ({self.max_runs})")
        if not self.budget_s > 0:
            raise ValueError(f"timing plan: the budget must be positive seconds, not {self.budget_s}")
        if self.warmup_s < 0 or self.min_warmup < 1:
            raise ValueError("timing plan: warmup_s must be >= 0 and min_warmup >= 1")
        if self.flush not in FLUSHES:
            raise ValueError(f"timing plan: flush is one of {', '.join(FLUSHES)}, not {self.flush!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TimingPlan":
        return cls(**d)

    def with_budget(self, budget_s: float | None) -> "TimingPlan":
        """This plan with another budget (None keeps it): what `--timing-budget` sets."""
        return self if budget_s is None else replace(self, budget_s=budget_s)


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
    # Builds and the baselines' torch.compile wait while the device times, and timing waits for them
    # (lock.beside_timing); False: they run beside timing, as before 2026-11-25 (for comparison).
    quiet_host: bool = True
    memory_limit_gb: float = 32.0        # host memory of the solution's child process
    timing: TimingPlan = field(default_factory=TimingPlan)
    timed_outputs_checked: int = 2       # timed calls chosen at random whose outputs are checked too (and the last)
    sanity_speedup: float = 10.0         # above this vs torch.compile: re-measured and flagged
    use_baseline_cache: bool = True
    transfer: str = "auto"               # outputs to the reference: "auto" (CUDA IPC where it works) | "files"
    reward: RewardSchedule = field(default_factory=RewardSchedule)
