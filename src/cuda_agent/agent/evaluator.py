"""The harness as the agent sees it: compile, verify and profile of the workspace (swappable, like
mini-swe-agent's environment), and their results written for a model to read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cuda_agent.harness import BuildResult, EvalConfig, EvalResult, TimingPlan, TimingStats, compile_solution
from cuda_agent.service import PRIORITY_AGENT, EvalService

MAX_FINDINGS = 10


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


def format_eval(r: EvalResult, action: str) -> str:
    """What verify or profile found, in the order a reader wants it: verdict, why, numbers, reward."""
    if r.correct:
        lines = [f"{action}: PASSED (correct" + (f", max abs error {r.max_abs_error:.3g})" if r.max_abs_error is not None else ")")]
    else:
        lines = [f"{action}: FAILED at stage '{r.stage}': {r.reason}"]
        lines += [f"  {f}" for f in r.findings[:MAX_FINDINGS]]
        if len(r.findings) > MAX_FINDINGS:
            lines.append(f"  (and {len(r.findings) - MAX_FINDINGS} more)")
        if r.build is not None and not r.build.ok and r.build.errors.strip():
            lines.append(r.build.errors.strip())
    times = [(name, t) for name, t in (("eager", r.eager), ("torch.compile", r.compile), ("yours", r.solution))
             if t is not None]
    if times:
        lines.append("median time: " + ", ".join(f"{name} {_ms(t)}" for name, t in times))
    speed = [f"{v:.2f}x vs {name}" for name, v in (("eager", r.speedup_vs_eager),
                                                     ("torch.compile", r.speedup_vs_compile)) if v is not None]
    if speed:
        lines.append("speed-up: " + ", ".join(speed))
    lines.append(f"reward: {r.reward:g} ({r.milestone})")
    if r.flags:
        lines.append("flags: " + ", ".join(r.flags))
    return "\n".join(lines)


def _ms(t: TimingStats) -> str:
    return f"{t.median_ms:.4g} ms"
