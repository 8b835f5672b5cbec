"""EvalConfig: every knob of one evaluation, with the paper's defaults (how the models are timed is
its `timing`, a `measure.TimingPlan`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuda_agent.harness.reward import RewardSchedule
from cuda_agent.measure import TimingPlan

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
    # With quiet_host, on a GPU: the reference's torch.compile lets go of the device lock while it traces and generates
    # code (CPU work, seconds; its autotuning and runs still hold it), so an evaluation waiting to time waits for the
    # compile's device work, not its CPU work (measure.compile_off_lock, as synth's workers do). False: held through.
    compile_off_lock: bool = True
    memory_limit_gb: float = 32.0        # host memory of the solution's child process
    timing: TimingPlan = field(default_factory=TimingPlan)
    timed_outputs_checked: int = 2       # timed calls chosen at random whose outputs are checked too (and the last)
    sanity_speedup: float = 10.0         # above this vs torch.compile: re-measured and flagged
    use_baseline_cache: bool = True
    transfer: str = "auto"               # outputs to the reference: "auto" (CUDA IPC where it works) | "files"
    reward: RewardSchedule = field(default_factory=RewardSchedule)

    def compile_lets_go(self, cuda: bool) -> bool:
        """Whether the reference's torch.compile lets go of the lock it holds shared (compile_off_lock). Never on
        the CPU backend: there the compile's CPU work is the timed device's own work, and beside a timer it is the
        load quiet_host keeps away (a burst of it can make an honest solution's figures disagree with the
        harness's clock: profiling._watched_run)."""
        return self.quiet_host and self.compile_off_lock and cuda
