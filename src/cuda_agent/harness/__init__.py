"""The evaluation harness, the judge: static checks, build, sandboxed verification, timing and
reward. This module is its one door; code outside the harness imports only from here.

Wings: `static/` reads a solution without running it; `build/` compiles it (toolchain, ninja,
object cache, precompiled headers, compiler messages); `workers/` runs it (the sandboxed solution
child, the reference worker, output transfer, spare processes, isolation). At the root: `timing`,
`lock` (the device lock), `baselines`, `reward`, `evaluation` (the entry point, `evaluate`), `session`
(its conversation with the two processes) and the config and result types.
"""

from cuda_agent.harness.backend import Backend, resolve_backend
from cuda_agent.harness.baselines import task_baselines, time_baselines
from cuda_agent.harness.build.cache import CacheUsage, Pruned, build_cache_usage, prune_build_cache
from cuda_agent.harness.config import EvalConfig, TimingPlan
from cuda_agent.harness.evaluation import (compile_solution, evaluate, evaluate_workspace, prebuild, read_solution,
                                          workspace_task)
from cuda_agent.harness.modules import make_inputs, make_model, module_from_source, timing_draw
from cuda_agent.harness.result import BuildResult, EvalResult, Finding, StaticReport, TimingStats, headline
from cuda_agent.harness.reward import Milestone, RewardSchedule, beats, milestone
from cuda_agent.harness.solution import SolutionError, snapshot
from cuda_agent.harness.static import POLICIES, check_solution
from cuda_agent.harness.lock import beside_timing, device_lock
from cuda_agent.harness.timing import autotune_alone, time_callable
from cuda_agent.harness.workers.spares import keep_warm

__all__ = [
    "POLICIES", "Backend", "BuildResult", "CacheUsage",
    "EvalConfig", "EvalResult", "Finding", "Milestone", "Pruned", "RewardSchedule", "SolutionError",
    "StaticReport", "TimingPlan", "TimingStats", "autotune_alone", "beats", "beside_timing", "build_cache_usage", "check_solution",
    "compile_solution", "device_lock", "evaluate", "evaluate_workspace", "headline", "keep_warm", "make_inputs", "make_model", "milestone",
    "module_from_source", "prebuild", "prune_build_cache", "read_solution", "resolve_backend",
    "snapshot", "task_baselines", "time_baselines", "time_callable", "timing_draw", "workspace_task",
]
