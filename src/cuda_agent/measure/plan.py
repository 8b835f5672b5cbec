"""TimingPlan: how a model is timed, the one description passed to every timing loop; TimingStats:
what a timing loop gives back for one model."""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any

FLUSHES = ("read", "write")


@dataclass(frozen=True)
class TimingPlan:
    """How many timed calls, for how long, after what warm-up. Two callers with the same plan time
    alike (and the judge's cached eager and torch.compile figures are keyed by the whole plan).

    A paired run (paired.py: the solution and its baselines in alternating windows) reads the
    second group too: it ends once the standard error of every speed-up is below `target_se`, or
    once `budget_s` of timed calls (all sides together) or `max_runs` calls of a side are spent."""

    min_runs: int = 30
    max_runs: int = 1000
    budget_s: float = 2.0        # seconds of timed calls per timing run (a paired run: all sides together)
    warmup_s: float = 0.1
    min_warmup: int = 3
    # How the cache is emptied before each call: "read" reads a buffer twice the L2's size (the L2
    # then holds clean lines, dropped for free); "write" zeroes it, as triton's do_bench does, which
    # leaves dirty lines that the timed call pays to write back.
    flush: str = "read"
    # Paired runs. The reward's milestones are 5% apart, so a speed-up must repeat within about 1%:
    # its standard error (of its log, i.e. relative) is driven below `target_se`.
    target_se: float = 0.005
    min_rounds: int = 6          # rounds (one window of each side) before the target may end the run
    window_s: float = 0.01       # a window's calls last about this long (on the slowest side), 1 to MAX_WINDOW calls
    # CUDA: ... and hold at least this much of the baselines' own GPU time (their events, trusted). A call's wall
    # time is mostly its round trip to the process that makes it: sized by it alone, a window of graph replays
    # held ~0.3 ms of GPU work and the demo's speed-up moved 11.5% between evaluations (H100, 2026-11-27; windows
    # of 25-32 replays: eager within 0.03-0.11%, benchmarks/device_2026-11-27b). 0: wall time alone.
    # 5 ms (6 replays of the demo's graphs) against 20 ms (21): the paired run took 1.4-2.0 s instead of 3.3-4.9 s,
    # eager moved 0.07-0.09% between evaluations either way, standard errors 0.2-0.4% (the target 0.5%), and the
    # solution's and torch.compile's 5-8% per-evaluation modes came in both (H100, 2026-11-27, device_2026-11-27e).
    window_gpu_ms: float = 5.0
    settle: float = 0.05         # warm-up windows until each side's last two agree within this share ...
    max_settle_rounds: int = 6   # ... or this many rounds of them have run
    # CUDA: where the reference can be captured in a CUDA graph, every side is timed by replays of a
    # graph of about `graph_ms` of its calls (graphs.py), the host's time to issue them in no side's
    # figure; False: every call timed alone, as on the CPU.
    graphs: bool = True
    graph_ms: float = 1.0
    # CUDA: the spin each timed call is queued behind holds every SM (measure/fill.py), not one thread, so that work
    # a call puts on a stream that never waits for the caller's cannot run beside the spin, done before the timer's
    # events (relaxed policy; hack corpus relaxed_stream_during_spin). False until measured on a GPU.
    spin_fills_gpu: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.min_runs <= self.max_runs:
            raise ValueError(f"timing plan: need 1 <= min_runs ({self.min_runs}) <= max_runs ({self.max_runs})")
        if not self.budget_s > 0:
            raise ValueError(f"timing plan: the budget must be positive seconds, not {self.budget_s}")
        if self.warmup_s < 0 or self.min_warmup < 1:
            raise ValueError("timing plan: warmup_s must be >= 0 and min_warmup >= 1")
        if self.flush not in FLUSHES:
            raise ValueError(f"timing plan: flush is one of {', '.join(FLUSHES)}, not {self.flush!r}")
        if self.window_gpu_ms < 0:
            raise ValueError(f"timing plan: window_gpu_ms is milliseconds >= 0 (0: windows sized by wall time "
                             f"alone), not {self.window_gpu_ms}")
        if not (self.target_se > 0 and self.window_s > 0 and self.settle > 0 and self.graph_ms > 0):
            raise ValueError("timing plan: target_se, window_s, settle and graph_ms must be positive (a share, "
                             "seconds, a share, milliseconds)")
        if self.min_rounds < 2 or self.max_settle_rounds < 0:
            raise ValueError("timing plan: min_rounds must be >= 2 (a standard error needs two rounds) and "
                             "max_settle_rounds >= 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TimingPlan":
        return cls(**d)

    def key(self) -> str:
        """A short name for the plan, the same for equal plans (a record says which plan timed it)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:10]

    def with_budget(self, budget_s: float | None) -> "TimingPlan":
        """This plan with another budget (None keeps it): what `--timing-budget` sets."""
        return self if budget_s is None else replace(self, budget_s=budget_s)


@dataclass
class TimingStats:
    """Milliseconds per call over `runs` timed iterations (warm-up excluded, L2 flushed between).
    Taken in `windows` windows of a paired run (0: one run of calls), `window_spread` is the spread
    of the windows' medians within the run: their interquartile range over their median."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    iqr_ms: float
    runs: int
    offstream_ms: float = 0.0   # work left on other streams beyond the noise bound, charged a call on average (CUDA)
    windows: int = 0
    window_spread: float = 0.0

    @classmethod
    def from_samples(cls, samples_ms: list[float], offstream_ms: float = 0.0,
                     window_medians: list[float] | None = None) -> "TimingStats":
        s = sorted(samples_ms)
        n = len(s)
        q1, q3 = s[n // 4], s[(3 * n) // 4] if n > 1 else s[0]
        w = sorted(window_medians or [])
        spread = (w[(3 * len(w)) // 4] - w[len(w) // 4]) / statistics.median(w) if w and statistics.median(w) > 0 else 0.0
        return cls(median_ms=statistics.median(s), mean_ms=statistics.fmean(s), min_ms=s[0], max_ms=s[-1],
                   std_ms=statistics.pstdev(s) if n > 1 else 0.0, iqr_ms=q3 - q1, runs=n, offstream_ms=offstream_ms,
                   windows=len(w), window_spread=spread)
