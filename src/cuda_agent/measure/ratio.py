"""The statistics of a speed-up measured in paired windows (paired.py).

Each round of a paired run times one window of calls of every side; a window's figure is the
median of its calls, and a round's ratio is a baseline's window figure over the solution's. The
speed-up is the exponential of the trimmed mean of the rounds' log ratios; its standard error is
that of the trimmed mean (Tukey and McLaughlin: the winsorized standard deviation over
(1 - 2g) sqrt(n)), a share of the speed-up since it is taken on the log.

Why logs: noise on a time is a share of it, and the mean of log(a/b) is minus that of log(b/a), so
which side is on top changes nothing. Why trimmed: a window that met a burst of load on the host
(a page fault storm, another process waking) moves a mean, while the middle of the rounds keeps
most of a mean's efficiency and, unlike a median, has a standard error that is simple to trust
on twenty rounds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

TRIM = 0.2            # share of the rounds cut from each end before the mean
_FLOOR_MS = 1e-6      # a window's figure is never taken below this (a log of zero)


def trimmed_mean_se(values: Sequence[float], trim: float = TRIM) -> tuple[float, float]:
    """The mean of `values` with `trim` of them cut from each end, and its standard error
    (infinite below two values)."""
    n = len(values)
    if n == 0:
        raise ValueError("a trimmed mean of no values")
    s = sorted(values)
    g = int(trim * n)
    kept = s[g:n - g]
    mean = statistics.fmean(kept)
    if n < 2:
        return mean, math.inf
    winsorized = [s[g]] * g + kept + [s[n - g - 1]] * g
    return mean, statistics.stdev(winsorized) / ((1 - 2 * g / n) * math.sqrt(n))


@dataclass(frozen=True)
class Ratio:
    """A baseline's time over the solution's from `rounds` rounds of paired windows: `value` the
    speed-up, `se` its standard error as a share of it, `low` and `high` the quartiles of the
    rounds' own ratios (their spread within the run)."""

    value: float
    se: float
    rounds: int
    low: float
    high: float

    @classmethod
    def of(cls, baseline_ms: Sequence[float], solution_ms: Sequence[float], trim: float = TRIM) -> "Ratio":
        """The ratio of two sides' window figures, round by round (the i-th of each were timed in one round)."""
        if len(baseline_ms) != len(solution_ms) or not baseline_ms:
            raise ValueError(f"paired figures: {len(baseline_ms)} baseline windows against {len(solution_ms)} of "
                             "the solution (one of each per round, at least one round)")
        logs = [math.log(max(b, _FLOOR_MS) / max(s, _FLOOR_MS)) for b, s in zip(baseline_ms, solution_ms)]
        mean, se = trimmed_mean_se(logs, trim)
        q = sorted(logs)
        n = len(q)
        return cls(value=math.exp(mean), se=se, rounds=n, low=math.exp(q[n // 4]), high=math.exp(q[(3 * n) // 4]))

    def to_dict(self) -> dict:
        return {"value": round(self.value, 5), "se": round(self.se, 5) if math.isfinite(self.se) else None,
                "rounds": self.rounds, "low": round(self.low, 5), "high": round(self.high, 5)}

    @classmethod
    def from_dict(cls, d: dict) -> "Ratio":
        return cls(value=d["value"], se=math.inf if d.get("se") is None else d["se"], rounds=d["rounds"],
                   low=d["low"], high=d["high"])


def settled(figures: Sequence[float], tolerance: float) -> bool:
    """Whether the last two window figures of a side agree within `tolerance` (a share)."""
    if len(figures) < 2:
        return False
    a, b = figures[-2], figures[-1]
    return a > 0 and b > 0 and abs(b / a - 1) <= tolerance
