"""The reward: the paper's discrete milestones, defined here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RewardSchedule:
    """-1 on any failure; `correct` when verified; `faster_than_eager` when at least `margin` faster
    than eager; `faster_than_compile` when at least `margin` faster than both eager and torch.compile."""

    failed: float = -1.0
    correct: float = 1.0
    faster_than_eager: float = 2.0
    faster_than_compile: float = 3.0
    margin: float = 0.05


@dataclass(frozen=True)
class Milestone:
    name: str           # failed | correct | faster_than_eager | faster_than_compile
    reward: float
    detail: str         # e.g. "1.31x vs eager (needs 1.05x), 0.97x vs torch.compile (needs 1.05x)"


def beats(speedup: float | None, margin: float) -> bool:
    """True when `speedup` (baseline time / solution time) clears the margin: at least (1 + margin)x."""
    return speedup is not None and speedup >= 1.0 + margin


def milestone(correct: bool, speedup_vs_eager: float | None, speedup_vs_compile: float | None,
              schedule: RewardSchedule = RewardSchedule()) -> Milestone:
    """The milestone reached and its reward."""
    if not correct:
        return Milestone("failed", schedule.failed, "not verified")
    need = f"needs {1 + schedule.margin:.2f}x"
    parts = []
    if speedup_vs_eager is not None:
        parts.append(f"{speedup_vs_eager:.2f}x vs eager ({need})")
    if speedup_vs_compile is not None:
        parts.append(f"{speedup_vs_compile:.2f}x vs torch.compile ({need})")
    detail = ", ".join(parts) or "not profiled"
    if beats(speedup_vs_eager, schedule.margin) and beats(speedup_vs_compile, schedule.margin):
        return Milestone("faster_than_compile", schedule.faster_than_compile, detail)
    if beats(speedup_vs_eager, schedule.margin):
        return Milestone("faster_than_eager", schedule.faster_than_eager, detail)
    return Milestone("correct", schedule.correct, detail)
