"""The one entry point of the harness: evaluate a solution of a task.

(API fixed; implementation landing.)
"""

from __future__ import annotations

from pathlib import Path

from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.result import BuildResult, EvalResult
from cuda_agent.tasks import Task


def evaluate(task: Task, solution: str | Path, config: EvalConfig | None = None) -> EvalResult:
    """Static checks, build, sandboxed correctness, timing and reward for `solution`: a workspace
    folder (model_new.py + kernels/) or a single KernelBench-style model_new.py using load_inline."""
    raise NotImplementedError


def compile_solution(solution: str | Path, config: EvalConfig | None = None) -> BuildResult:
    """Static checks and build only (the workspace's `compile` command)."""
    raise NotImplementedError


def evaluate_workspace(workspace: str | Path, config: EvalConfig | None = None) -> EvalResult:
    """Evaluate a workspace against the task recorded in its signed manifest (the workspace's
    `verify` command uses profile=False, `profile` uses profile=True)."""
    raise NotImplementedError
