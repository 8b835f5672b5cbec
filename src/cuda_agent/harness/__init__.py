"""The evaluation harness, the judge: static checks, build, sandboxed verification, timing and
reward. This module is its one door, and every name here means "judge a solution": code outside
the harness imports only from here.

Wings: `static/` reads a solution without running it; `build/` compiles it (toolchain, ninja,
object cache, precompiled headers, compiler messages); `workers/` runs it (the solution's child,
the reference worker, the timed calls, output transfer, spare processes). At the root:
`evaluation` (the entry point, `evaluate`), `session` (its conversation with the two processes),
`profiling` (the solution timed paired with eager and torch.compile), `solution`, `baselines` (the
judge's cache of eager and torch.compile figures, a drift check beside the paired ones), `reward`, and the
config and result types. Running untrusted code is `cuda_agent.sandbox`'s; running and timing a
model is `cuda_agent.measure`'s: the harness builds on both.
"""

from cuda_agent.harness.baselines import task_baselines
from cuda_agent.harness.build.cache import build_cache_usage, prune_build_cache
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.evaluation import (compile_solution, evaluate, evaluate_workspace, prebuild, read_solution,
                                          workspace_task)
from cuda_agent.harness.result import BuildResult, EvalResult, Finding, StaticReport, headline
from cuda_agent.harness.reward import RewardSchedule, beats
from cuda_agent.harness.solution import SolutionError, snapshot
from cuda_agent.harness.static import POLICIES, check_solution
from cuda_agent.harness.workers.spares import keep_warm
from cuda_agent.measure import TimingPlan, TimingStats  # the plan an evaluation times with, and its figures

__all__ = [
    "POLICIES", "BuildResult", "EvalConfig", "EvalResult", "Finding", "RewardSchedule", "SolutionError", "StaticReport",
    "TimingPlan", "TimingStats", "beats", "build_cache_usage", "check_solution", "compile_solution", "evaluate",
    "evaluate_workspace", "headline", "keep_warm", "prebuild", "prune_build_cache", "read_solution", "snapshot",
    "task_baselines", "workspace_task",
]
