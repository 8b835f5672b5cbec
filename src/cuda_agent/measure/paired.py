"""Paired timing: the solution and its baselines timed in one stretch of time, window against
window, so that a speed-up is measured as the ratio it is.

Why: the reward is a ratio whose milestones are 5% apart, and a time taken now held against a
baseline taken hours ago on another machine moves more than that (H100: five evaluations in a
row of the demo solution read 22.0-29.7 us; per-call timing of a 16 MB clamp moved 3.5-5.8% idle
and 11-19% with 8 busy CPU processes). Whatever slows the machine for a few milliseconds slows
both sides of a round alike, and cancels in its ratio.

The loop, driven here where the clock is trusted (`drive_paired`); each side's calls are made
wherever `Side.call` makes them (the harness: the solution's child and the reference worker):
1. estimate: rounds of one call of each side until `min_warmup` rounds and `warmup_s` have
   passed. Each side's median wall time per call sets the window: `window_s` on the slowest side,
   on CUDA at least `window_gpu_ms` of the baselines' GPU time, 1 to MAX_WINDOW calls, and no more
   than `max_runs / min_rounds` (`window_length`).
2. settle: rounds of windows, not timed, until each side's last two window figures agree within
   `settle`, at most `max_settle_rounds` of them or a quarter of `budget_s`.
3. timed rounds, until the standard error of every speed-up is below `target_se` (after
   `min_rounds` rounds), or `budget_s` of timed calls are spent (after `min_rounds`), or a side's
   next window would pass `max_runs`; cut short where the rounds' median wall time times their
   count is past the wall limit (one slow call neither ends nor shortens the run). `min_runs` is
   the single-side loop's (timing.drive): here the rounds are counted.
In a round every window has the same length, drawn from [k, k + k // 2] (its end is no count the
solution can keep), and the same inputs: one seed per position drawn here, unpredictably, for
the round. The solution's window comes first or last (a coin), the baselines' windows together in
a random order inside one `quiet()` block (where the harness stops the solution's processes, so
nothing it left running can slow them). The outputs of solution calls are checked as in
`timing.drive`: each with a probability from the expected count, the last always, and as many
extra calls as are missing, each checked.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, ContextManager, Sequence

import torch

from cuda_agent.measure.plan import TimingPlan, TimingStats
from cuda_agent.measure.ratio import Ratio, settled
from cuda_agent.measure.timing import CallTimer, CallTimes, host_floor, samples_of

_perf_counter_ns = time.perf_counter_ns  # bound at import, as in timing.py
MAX_WINDOW = 32
PER_CALL, GRAPH = "per_call", "graph"    # how each call was timed (CallTimer; replays of a captured graph)
# the baselines by graph replays, the solution per call: where the reference can be captured and the solution
# cannot, the baselines keep the method they chose (issue 24: the baseline fixes the method) and the solution's
# launches stay in its own figure; timed per call as well, torch.compile's host work was charged to it and a
# solution that refused capture read 1.50x faster than it with the same work (2x H200, 2026-11-28)
GRAPH_BASELINES = "graph_baselines"
TARGET, BUDGET, MAX_RUNS, WALL_LIMIT = "target", "budget", "max_runs", "wall_limit"   # what ended a run


@dataclass(frozen=True)
class Side:
    """One side of a paired run: `call(seed)` makes one call on the inputs of `seed` and returns
    its figures (the driver stamps its wall time)."""

    name: str
    call: Callable[[int], CallTimes]


Windows = dict[str, list[list[CallTimes]]]


@dataclass
class PairedRun:
    """What `drive_paired` did and saw: each side's timed windows in round order (and the warm-up
    ones apart), each round's order, the solution calls whose outputs were checked (indices among
    all its calls, warm-up included), what ended the run."""

    solution: str
    windows: Windows
    warmup: Windows
    orders: list[tuple[str, ...]]
    window: int
    settled: bool
    stopped: str
    checked: list[int] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.orders)

    @property
    def cut_short(self) -> bool:
        return self.stopped == WALL_LIMIT

    def calls(self, side: str) -> list[CallTimes]:
        """A side's timed calls, in order."""
        return [c for w in self.windows[side] for c in w]

    def baselines(self) -> list[str]:
        return [s for s in self.windows if s != self.solution]

    def spent_ms(self, cuda: bool = False) -> dict[str, dict[str, float]]:
        """Where the run's windows spent their time, by side, warm-up and timed calls together: the calls' own time
        (`device`: their GPU events, or the CPU's clock) and the rest of each request as the driver's clock saw it
        (`over`: the round trip, drawing and loading the inputs, the timer's synchronizes), in milliseconds. Then,
        over the timed calls, what made their samples (timing.samples_of): the median of the calls' own time
        (`device_median`), the host's time to issue a call that no sample goes below (`host_floor`), the off-stream
        time charged to each (`offstream`) and the samples' median (`sample_median`); a sample median above the
        device's says which of the two lifted it (issue 24: a side 7% slow for a whole run), and `wall_median` what
        the driver's clock saw of each request."""
        out = {}
        for side in self.windows:
            calls = [c for w in (*self.warmup[side], *self.windows[side]) for c in w]
            timed = self.calls(side) or [CallTimes(0.0, 0.0, 0.0)]
            samples, offstream = samples_of(timed, cuda)
            out[side] = {"calls": len(calls), "device": round(sum(c.device_ms for c in calls), 3),
                         "over": round(sum(max(c.wall_ms - c.device_ms, 0.0) for c in calls), 3),
                         "device_median": round(statistics.median([c.device_ms for c in timed]), 5),
                         "host_floor": round(host_floor(timed, cuda), 5),
                         "offstream": round(offstream, 5), "sample_median": round(statistics.median(samples), 5),
                         "wall_median": round(statistics.median([c.wall_ms for c in timed]), 5)}
        return out


def window_figures(windows: Sequence[Sequence[CallTimes]], cuda: bool) -> list[float]:
    """Each window's figure: the median of its calls' samples (timing.samples_of over the side's
    calls together, so that the host floor and the off-stream charge are the side's)."""
    samples, _ = samples_of([c for w in windows for c in w], cuda)
    out, i = [], 0
    for w in windows:
        out.append(statistics.median(samples[i:i + len(w)]))
        i += len(w)
    return out


def ratios(windows: Windows, solution: str, cuda: bool, per: dict[str, int] | None = None) -> dict[str, Ratio]:
    """Each baseline's time over the solution's, round by round; `per`: the calls a timed call of each side stands
    for (a graph's replay; 1 where a side is not named), where the sides' differ."""
    per = per or {}
    ours = [x / per.get(solution, 1) for x in window_figures(windows[solution], cuda)]
    return {side: Ratio.of([x / per.get(side, 1) for x in window_figures(w, cuda)], ours)
            for side, w in windows.items() if side != solution}


def calls_per(run: PairedRun, graph_calls: int, solution_per_call: bool = False) -> dict[str, int]:
    """The calls a timed call of each side stands for: a replay of a graph of `graph_calls` calls (0: each call
    timed alone), the solution's calls alone beside the baselines' graphs with `solution_per_call` (GRAPH_BASELINES)."""
    per = {side: graph_calls or 1 for side in run.baselines()}
    per[run.solution] = 1 if solution_per_call else graph_calls or 1
    return per


def side_stats(run: PairedRun, side: str, cuda: bool, per: int = 1) -> TimingStats:
    """A side's statistics over its timed calls, with its windows' spread; `per`: the calls each
    timed one stands for (a graph's replay), whose figures are divided among them."""
    samples, offstream = samples_of(run.calls(side), cuda)
    return TimingStats.from_samples([x / per for x in samples], offstream / per,
                                    [x / per for x in window_figures(run.windows[side], cuda)])


def window_length(plan: TimingPlan, est: dict[str, float], warm: Windows, baselines: Sequence[Side],
                  cuda: bool) -> int:
    """Calls a window: `window_s` of wall time on the slowest side (`est`: each side's median wall time per
    call) and, on CUDA, at least `window_gpu_ms` of the slowest baseline's own GPU time (the reference's
    figures, never the solution's), 1 to MAX_WINDOW and no more than `max_runs / min_rounds`."""
    k = round(plan.window_s * 1000 / max(est.values()))
    if cuda and plan.window_gpu_ms > 0 and baselines:
        gpu = max(statistics.median([w[0].device_ms for w in warm[b.name]]) for b in baselines)
        k = max(k, math.ceil(plan.window_gpu_ms / max(gpu, 1e-3)))
    return max(1, min(MAX_WINDOW, k, plan.max_runs // plan.min_rounds))


def drive_paired(solution: Side, baselines: Sequence[Side], plan: TimingPlan, *, cuda: bool = False,
                 check: Callable[[int, int], None] | None = None, checks: int = 0,
                 quiet: Callable[[], ContextManager] = nullcontext,
                 clock: Callable[[], int] = _perf_counter_ns) -> PairedRun:
    """The paired loop (see the module's docstring). `check(i, seed)` has the output of solution
    call i (on the inputs of `seed`) checked, right after it returned; `quiet()` is entered around
    each round's baseline windows; `cuda`: how a call's figures make its sample (timing.samples_of)."""
    rng = secrets.SystemRandom()
    sides = [solution, *baselines]
    made, last_seed = 0, 0
    checked: list[int] = []
    p = 0.0   # the chance that a solution call is checked: none in the warm-up

    def one(side: Side, seed: int) -> CallTimes:
        nonlocal made, last_seed
        t0 = clock()
        times = side.call(seed)
        wall = (clock() - t0) / 1e6
        if side is solution:
            made, last_seed = made + 1, seed
            if check is not None and rng.random() < p:
                check(made - 1, seed)
                checked.append(made - 1)
        return replace(times, wall_ms=wall)

    def round_(k: int, into: Windows) -> tuple[str, ...]:
        seeds = [rng.getrandbits(62) for _ in range(k)]
        order = list(baselines)
        rng.shuffle(order)
        first = rng.random() < 0.5
        if first:
            into[solution.name].append([one(solution, s) for s in seeds])
        with quiet():
            for b in order:
                into[b.name].append([one(b, s) for s in seeds])
        if not first:
            into[solution.name].append([one(solution, s) for s in seeds])
        names = tuple(b.name for b in order)
        return (solution.name, *names) if first else (*names, solution.name)

    warm: Windows = {s.name: [] for s in sides}
    t0 = clock()
    while len(warm[solution.name]) < plan.min_warmup or (clock() - t0) / 1e9 < plan.warmup_s:
        round_(1, warm)
        if len(warm[solution.name]) >= 50:
            break
    est = {s.name: max(statistics.median([w[0].wall_ms for w in warm[s.name]]), 1e-3) for s in sides}
    k = window_length(plan, est, warm, baselines, cuda)
    settle: Windows = {s.name: [] for s in sides}
    is_settled = False
    t0 = clock()
    for _ in range(plan.max_settle_rounds):
        round_(k, settle)
        if all(settled(window_figures(settle[s.name], cuda), plan.settle) for s in sides):
            is_settled = True
            break
        if (clock() - t0) / 1e9 > plan.budget_s / 4:  # noisy single calls may never agree: a share of the budget
            break
    for name, ws in settle.items():
        warm[name].extend(ws)

    expected = min(plan.max_runs, max(plan.min_rounds * k, plan.budget_s * 1000 / sum(est.values())))
    p = min(1.0, checks / expected) if check is not None else 0.0
    timed: Windows = {s.name: [] for s in sides}
    orders: list[tuple[str, ...]] = []
    round_walls: list[float] = []   # the timed calls' wall time of each round
    wall_limit_ms = (3 * plan.budget_s + 5) * 1000
    stopped = MAX_RUNS
    while (left := plan.max_runs - sum(len(w) for w in timed[solution.name])) > 0:
        orders.append(round_(min(left, k + rng.randint(0, k // 2)), timed))
        round_walls.append(sum(c.wall_ms for s in sides for c in timed[s.name][-1]))
        n = len(orders)
        # one slow call neither ends nor shortens the run: the rounds' median wall time stands for each
        spent_ms = statistics.median(round_walls) * n
        if n >= plan.min_rounds:
            if max(r.se for r in ratios(timed, solution.name, cuda).values()) <= plan.target_se:
                stopped = TARGET
                break
            if spent_ms >= plan.budget_s * 1000:
                stopped = BUDGET
                break
        if n >= 2 and spent_ms > wall_limit_ms:
            stopped = WALL_LIMIT
            break
    if check is not None:
        if made - 1 not in checked:  # the last solution call, still the last the child made
            check(made - 1, last_seed)
            checked.append(made - 1)
        p = 0.0
        while len(checked) < checks + 1:   # the last, and `checks` more
            seed = rng.getrandbits(62)
            one(solution, seed)
            check(made - 1, seed)
            checked.append(made - 1)
    return PairedRun(solution.name, timed, warm, orders, k, is_settled, stopped, checked)



def time_paired(solution: Callable[..., object], baselines: dict[str, Callable[..., object]],
                draw: Callable[[int], list], device: torch.device, plan: TimingPlan = TimingPlan()) -> PairedRun:
    """Trusted callables timed paired in this process (benchmarks, tests): one CallTimer for all,
    each call on the inputs `draw(seed)` gives."""
    timer = CallTimer(device, plan)

    def side(name: str, fn: Callable[..., object]) -> Side:
        def call(seed: int) -> CallTimes:
            times, _ = timer(fn, draw(seed))
            return times
        return Side(name, call)

    with torch.no_grad():
        return drive_paired(side("solution", solution), [side(n, f) for n, f in baselines.items()], plan,
                            cuda=device.type == "cuda")


@dataclass
class PairedTiming:
    """A paired run as a verdict reports it: how each call was timed (`method`: PER_CALL or
    GRAPH), what ended the run (`stopped`: TARGET, BUDGET, MAX_RUNS or WALL_LIMIT) and the
    standard error it aimed at, its timed rounds and window, its warm-up rounds and whether they
    settled, and each baseline's speed-up over the solution (`ratios`). `graph_calls`: the calls a
    graph holds (GRAPH; a timed call is one replay), 0 per call; with GRAPH_BASELINES, the baselines' graphs (the
    solution's calls each timed alone). `cached_ms`: the judge's cached
    median of each baseline where it had one, recorded beside the paired figures as a drift check
    (never the reward's)."""

    method: str
    stopped: str
    target_se: float
    rounds: int
    window: int
    warmup_rounds: int
    settled: bool
    ratios: dict[str, Ratio]
    graph_calls: int = 0
    cached_ms: dict[str, float] = field(default_factory=dict)

    @property
    def met(self) -> bool:
        """The standard error of every speed-up reached the target (else the budget or a limit ended it)."""
        return self.stopped == TARGET

    @classmethod
    def of(cls, run: PairedRun, plan: TimingPlan, cuda: bool, graph_calls: int = 0,
           solution_per_call: bool = False) -> "PairedTiming":
        """`graph_calls`: the calls each baseline's graph holds (0: per call); `solution_per_call`: the solution's
        calls timed alone beside them (GRAPH_BASELINES)."""
        method = (GRAPH_BASELINES if solution_per_call else GRAPH) if graph_calls else PER_CALL
        return cls(method=method, stopped=run.stopped, target_se=plan.target_se,
                   rounds=run.rounds, window=run.window, warmup_rounds=len(run.warmup[run.solution]),
                   settled=run.settled, graph_calls=graph_calls,
                   ratios=ratios(run.windows, run.solution, cuda, calls_per(run, graph_calls, solution_per_call)))

    def to_dict(self) -> dict:
        return {**asdict(self), "ratios": {k: r.to_dict() for k, r in self.ratios.items()}, "met": self.met}

    @classmethod
    def from_dict(cls, d: dict) -> "PairedTiming":
        d = {k: v for k, v in d.items() if k != "met"}
        return cls(**{**d, "ratios": {k: Ratio.from_dict(r) for k, r in d["ratios"].items()}})
