"""The harness as the agent sees it: compile, verify and profile of the workspace (swappable, like
mini-swe-agent's environment), and their results written for a model to read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cuda_agent.harness import BuildResult, EvalConfig, EvalResult, TimingPlan, compile_solution
from cuda_agent.service import PRIORITY_AGENT, EvalService


class Evaluator(Protocol):
    def compile(self) -> BuildResult: ...

    def evaluate(self, profile: bool, keep: Path) -> EvalResult:
        """verify (profile=False) or profile (profile=True) of the workspace as it is now; the
        files judged are left in `keep`."""
        ...


@dataclass
class WorkspaceEvaluator:
    """The real harness, through the evaluation service: the workspace is read here (its protected
    files checked, its solution snapshotted into `keep`), judged on one of the service's
    evaluators. compile builds here, in the agent's own process."""

    workspace: Path
    device: str
    timing: TimingPlan
    service: EvalService
    priority: int = PRIORITY_AGENT

    def compile(self) -> BuildResult:
        return compile_solution(self.workspace, EvalConfig(device=self.device))

    def evaluate(self, profile: bool, keep: Path) -> EvalResult:
        config = EvalConfig(device=self.device, profile=profile, timing=self.timing)
        return self.service.evaluate_workspace(self.workspace, config, keep=keep, priority=self.priority)


def format_build(r: BuildResult) -> str:
    if r.ok:
        return f"compile: succeeded in {r.seconds:.1f} s ({r.compiled} compiled, {r.cached} from cache)"
    return f"compile: FAILED after {r.seconds:.1f} s\n{r.errors.strip() or '(no compiler output)'}"

