"""Every benchmark metric, defined once, as pure functions over result rows (dicts).

A result row is one line of results.jsonl: `EvalResult.to_dict()` plus `level`, `problem_id` and
`roofline`. Only these keys are read: `correct`, `reward`, `milestone`, `speedup_vs_eager`,
`speedup_vs_compile`, `level`, and the timings `eager` / `compile` / `solution` (`median_ms`) with
`roofline.sol_ms` for the speed-of-light fractions.

Conventions (stated once, here):
- A speed-up is baseline time / solution time (2.0 means twice as fast).
- Rates are fractions of *all* tasks, failures included (a task without a solution is a failure).
- "Faster than X" without margin: correct and speed-up > 1.0 (KernelBench's fast_1). "With the
  margin": correct and speed-up >= 1 + margin, the test the reward applies (`harness.reward.beats`).
- Geometric-mean speed-up: over all tasks, a task without a measured speed-up (failed, or correct
  but not profiled) counted as 1.0x, i.e. as if the reference were kept. The correct-only variant
  takes the geometric mean over the correct tasks with a measured speed-up.
- fast_p (KernelBench): the fraction of all tasks that are correct and have speed-up > p;
  fast_0 is the pass rate.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal

from cuda_agent.harness import RewardSchedule, beats

Row = dict[str, Any]
Baseline = Literal["eager", "compile"]
BASELINES: tuple[Baseline, ...] = ("eager", "compile")
FAST_P = (0.0, 1.0, 1.5, 2.0)
MARGIN = RewardSchedule().margin


def passed(row: Row) -> bool:
    """Compiled and verified correct."""
    return bool(row.get("correct"))


def speedup(row: Row, baseline: Baseline) -> float | None:
    """The measured speed-up over `baseline`, or None when failed or not profiled."""
    value = row.get(f"speedup_vs_{baseline}")
    if not passed(row) or value is None or not value > 0:
        return None
    return float(value)


def speedup_or_one(row: Row, baseline: Baseline) -> float:
    """The speed-up, with a failure (or an unprofiled task) counted as 1.0x."""
    value = speedup(row, baseline)
    return 1.0 if value is None else value


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive numbers; None for none."""
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs)) if logs else None


def geomean_speedup(rows: list[Row], baseline: Baseline, correct_only: bool = False) -> float | None:
    """Geometric-mean speed-up over all tasks (failures as 1.0x) or over the correct ones only."""
    if correct_only:
        return geomean(v for r in rows if (v := speedup(r, baseline)) is not None)
    return geomean(speedup_or_one(r, baseline) for r in rows)


def _fraction(hits: int, rows: list[Row]) -> float:
    return hits / len(rows) if rows else 0.0


def pass_rate(rows: list[Row]) -> float:
    return _fraction(sum(passed(r) for r in rows), rows)


def fast_p(rows: list[Row], p: float, baseline: Baseline = "eager") -> float:
    """KernelBench's fast_p: the fraction of all tasks that are correct with speed-up > p.

    At p = 0 a correct task counts even when it was not profiled, so fast_0 equals the pass rate."""
    if p <= 0:
        return pass_rate(rows)
    return _fraction(sum(1 for r in rows if (v := speedup(r, baseline)) is not None and v > p), rows)


def faster_rate(rows: list[Row], baseline: Baseline, margin: float = 0.0) -> float:
    """The fraction of all tasks that are correct and faster than `baseline`: speed-up > 1.0
    without margin (fast_1), at least 1 + margin with one (the reward's test)."""
    if margin <= 0:
        return fast_p(rows, 1.0, baseline)
    return _fraction(sum(1 for r in rows if beats(speedup(r, baseline), margin)), rows)


def reward_distribution(rows: list[Row]) -> dict[str, int]:
    """How many tasks reached each milestone, in the reward's order (failed first)."""
    counts = Counter(str(r.get("milestone") or ("correct" if passed(r) else "failed")) for r in rows)
    order = ["failed", "correct", "faster_than_eager", "faster_than_compile"]
    return {name: counts.get(name, 0) for name in order + sorted(set(counts) - set(order))}


def mean_reward(rows: list[Row]) -> float | None:
    values = [float(r["reward"]) for r in rows if r.get("reward") is not None]
    return sum(values) / len(values) if values else None


# ---- speed of light -------------------------------------------------------------------------

Timed = Literal["eager", "compile", "solution"]
TIMED: tuple[Timed, ...] = ("eager", "compile", "solution")


def median_ms(row: Row, which: Timed) -> float | None:
    stats = row.get(which)
    return float(stats["median_ms"]) if isinstance(stats, dict) and stats.get("median_ms") else None


def sol_fraction(row: Row, which: Timed) -> float | None:
    """The fraction of the speed-of-light time reached: SOL time / measured median time (1.0 is
    the physical limit). A solution's time counts only when it is correct."""
    sol = (row.get("roofline") or {}).get("sol_ms")
    ms = median_ms(row, which)
    if not sol or ms is None or (which == "solution" and not passed(row)):
        return None
    return sol / ms


def median(values: Iterable[float]) -> float | None:
    s = sorted(values)
    if not s:
        return None
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def median_sol_fraction(rows: list[Row], which: Timed) -> float | None:
    """The median over tasks (with a SOL time and a measured time) of `sol_fraction`."""
    return median(v for r in rows if (v := sol_fraction(r, which)) is not None)


# ---- summaries --------------------------------------------------------------------------------

@dataclass
class Summary:
    """Every metric of one group of tasks (a level, or all of them)."""

    group: str
    tasks: int
    passed: int
    pass_rate: float
    faster_eager: float
    faster_eager_margin: float
    faster_compile: float
    faster_compile_margin: float
    geomean_eager: float | None
    geomean_compile: float | None
    geomean_eager_correct: float | None
    geomean_compile_correct: float | None
    fast_p_eager: dict[str, float] = field(default_factory=dict)
    fast_p_compile: dict[str, float] = field(default_factory=dict)
    rewards: dict[str, int] = field(default_factory=dict)
    mean_reward: float | None = None
    sol_fraction: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(rows: list[Row], group: str = "all") -> Summary:
    """All metrics of `rows`, under the conventions in this module's docstring."""
    return Summary(
        group=group, tasks=len(rows), passed=sum(passed(r) for r in rows), pass_rate=pass_rate(rows),
        faster_eager=faster_rate(rows, "eager"), faster_eager_margin=faster_rate(rows, "eager", MARGIN),
        faster_compile=faster_rate(rows, "compile"),
        faster_compile_margin=faster_rate(rows, "compile", MARGIN),
        geomean_eager=geomean_speedup(rows, "eager"), geomean_compile=geomean_speedup(rows, "compile"),
        geomean_eager_correct=geomean_speedup(rows, "eager", correct_only=True),
        geomean_compile_correct=geomean_speedup(rows, "compile", correct_only=True),
        fast_p_eager={f"{p:g}": fast_p(rows, p, "eager") for p in FAST_P},
        fast_p_compile={f"{p:g}": fast_p(rows, p, "compile") for p in FAST_P},
        rewards=reward_distribution(rows), mean_reward=mean_reward(rows),
        sol_fraction={w: median_sol_fraction(rows, w) for w in TIMED})


def level_of(row: Row) -> str:
    level = row.get("level")
    return f"level {level}" if level is not None else "no level"


def level_groups(rows: list[Row]) -> dict[str, list[Row]]:
    """The rows by level, in level order ("no level" last); empty where there is only one group,
    which would be the same tasks as "overall"."""
    groups: dict[str, list[Row]] = {}
    for r in sorted(rows, key=lambda r: (r.get("level") is None, r.get("level") or 0)):
        groups.setdefault(level_of(r), []).append(r)
    return groups if len(groups) > 1 else {}


def by_level(rows: list[Row]) -> list[Summary]:
    """One summary per level (in level order) where there are several, then one over all tasks."""
    return [summarize(g, name) for name, g in level_groups(rows).items()] + [summarize(rows, "overall")]
