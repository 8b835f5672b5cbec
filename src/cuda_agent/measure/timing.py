"""Timing, kept apart from the evaluation logic: one function times any callable the same way for
eager, torch.compile and a solution.

CUDA: events around the call on the current stream, the call issued while the GPU spins on a short
wait kernel (so the launch latency of the first kernel is not in the time). A sample is never less
than the host's time to issue the call, taken as the run's 10th percentile of those times: CPU work
done in every call cannot hide under the spin, and the jitter of the host's Python and dispatch
overhead, which moved small calls' medians by 15-65% between runs, stays out (H100, 2026-11-24:
GPU-event medians agree within 0.5% between runs, and so do these samples).
After each call two device-wide synchronizes: the first waits for work the call left on other
streams, the second finds the device idle; their difference, less the same difference taken before
the call (nothing issued: on an H100 the first of two synchronizes after an event's took 2-6 us
longer with no work left, 2026-11-27), is charged to that call's sample by as much as it passes the
noise of honest calls (OFFSTREAM_TOLERANCE_*), so side streams are counted without charging every
call a synchronize's latency and its jitter.
L2 emptied before each call; warm-up excluded. CPU: the same with a monotonic clock and a
cache-sized flush. Lines a call marked persisting (an access-policy window) survive any flush that
reads or writes normally: on CUDA they are made normal again (`reset_persisting_l2`) before the flush
and after the call, so a call neither finds its data in L2 from the last one nor keeps L2 from the
baselines timed after it.

Two halves: `CallTimer` times one call where the callable runs; `drive` makes the loop's decisions
where the clock is trusted. In an evaluation the harness drives the solution's child and the
reference worker call by call, paired (paired.drive_paired, the same halves): each call's input
seed is drawn by the harness and sent with the request for that call, so nothing is known of a
call's inputs before it is asked for; the harness stamps each call with its own clock, picks after
a call returned whether its output is checked, and holds the figures the child reports against its
own clock (`watch`). Where the code timed is trusted and timed alone (the baselines' tables, synth's
candidates), `time_callable` runs both halves of `drive` in one process.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterator, Sequence

import torch

from cuda_agent.devices import timing_cores
from cuda_agent.measure.driver import driver_function
from cuda_agent.measure.fill import FillSpin
from cuda_agent.measure.plan import TimingPlan, TimingStats

_CPU_FLUSH_BYTES = 64 << 20
# Bound at import, before any solution code runs in the child: replacing time.perf_counter_ns or
# torch.cuda.Event afterwards cannot change the clock the harness reads.
_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_sleep = torch.cuda._sleep
_sum = torch.sum
# Before each timed call the GPU spins this long, so the call's kernels are queued behind the spin
# and run back to back: the time is the device's, never less than the host took to issue the call.
SPIN_MS = 0.2
SPIN_NS = int(SPIN_MS * 1e6)
# Two back-to-back synchronizes after an honest call differ too: 1-5 us on an idle H100 in a quiet
# process, 5-45 us (0.2-4.6% of the call) in the baseline workers of the KernelBench tables
# (2026-11-24). Work a call left on other streams is charged to it only beyond the larger of these bounds, so
# honest calls are not charged that noise. Hiding work there gains at most the bound (and the
# calibration's cap, 5 us more) a call: the bound alone reads a call past 100 us up to 1.05x its true speed (the
# reward's whole margin), one of 20 us 1.33x.
# Timed by graph replays (the paired judge's way wherever the reference can be captured) nothing can
# be hidden there: a capture fails unless every side stream joins the captured one.
OFFSTREAM_TOLERANCE_MS = 0.005
OFFSTREAM_TOLERANCE_SHARE = 0.05


# Bound at import, before a solution's code runs in the child: cuCtxResetPersistingL2Cache makes every
# persisting L2 line of this process's context normal again (CUDA_SUCCESS is 0; a GPU without persisting
# lines, before compute capability 8.0, refuses it and has none to reset).
reset_persisting_l2 = driver_function("cuCtxResetPersistingL2Cache")


def _flush_buffer(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
        return torch.empty(max(2 * l2, 8 << 20) // 4, dtype=torch.int32, device=device)
    # float32: a sum over int32 takes a slow path on the CPU (12 ms against 150 ms for 64 MB here)
    return torch.zeros(_CPU_FLUSH_BYTES // 4, dtype=torch.float32)


_SEED_MASK = (1 << 62) - 1


def call_seed(run_seed: int, index: int) -> int:
    """The input seed of call `index` of a timing run: every process derives the same one."""
    return (run_seed * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & _SEED_MASK


@dataclass(frozen=True)
class CallTimes:
    """One timed call as the process that ran it read it (`device_ms`: the GPU events, or the host
    clock on the CPU; `host_ms`: the host's time to issue it; `left_ms`: what its device-wide
    synchronize took beyond an idle one, less the same figure taken before it) and, in `wall_ms`, as the process that asked for it read
    its own clock around the whole request: that one is outside the solution's reach."""

    device_ms: float
    host_ms: float
    left_ms: float
    wall_ms: float = 0.0
    # a trusted call's host work inside `wall_ms` that a solution's call does not do: the input sets a baseline's
    # graph replay draws beyond the one a solution's call draws, where the solution is timed per call (paired's
    # GRAPH_BASELINES). Left out of the overhead `watch` takes from the trusted calls; never read from a solution.
    extra_ms: float = 0.0

    @property
    def claimed_ms(self) -> float:
        """The call's time by the timing process's own figures."""
        return max(self.device_ms, self.host_ms) + self.left_ms


@dataclass
class Run:
    """What a timing loop's driver decided and saw: the timed calls (warm-up excluded), the indices
    (among all calls, warm-up included) whose outputs were checked, and whether the loop was cut
    short by its wall-clock limit."""

    calls: list[CallTimes]
    warmup: list[CallTimes]
    checked: list[int] = field(default_factory=list)
    cut_short: bool = False


@dataclass
class Timed:
    """What an in-process timing run gives back: the stats, the last call's output and index."""

    stats: TimingStats
    output: object
    index: int
    run: Run | None = None


def cycle(sets: Sequence[list]) -> Callable[[int], list]:
    """Input sets used in turn (trusted code and microbenchmarks; the harness draws fresh ones)."""
    return lambda i: sets[i % len(sets)]


def _spin_cycles(device: torch.device, ms: float) -> int:
    """GPU clock cycles that a spin kernel (torch.cuda._sleep) takes for about `ms` milliseconds."""
    probe = 1_000_000
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _sleep(probe // 10)  # warm-up: the first launch loads the kernel
    start.record()
    _sleep(probe)
    end.record()
    end.synchronize()
    return max(1, int(probe * ms / max(start.elapsed_time(end), 1e-3)))


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if n else 0.0


def _synchronize_excess(device: torch.device) -> float:
    """How much longer a device-wide synchronize takes than the one right after it (ms): the first
    waits for work left on any stream, the second finds the device idle."""
    t0 = _perf_counter_ns()
    _synchronize(device)
    t1 = _perf_counter_ns()
    _synchronize(device)
    return ((t1 - t0) - (_perf_counter_ns() - t1)) / 1e6


class CallTimer:
    """Times one call at a time, in the process where the callable runs: the cache emptied, the
    device synchronized, then the call between GPU events issued behind a short spin (CUDA), or
    between two reads of the host clock (CPU)."""

    def __init__(self, device: torch.device, plan: TimingPlan = TimingPlan()):
        self.device, self.cuda = device, device.type == "cuda"
        self.flush = _flush_buffer(device)
        self.spin = _spin_cycles(device, SPIN_MS) if self.cuda else 0
        # a spin that holds every SM (measure/fill.py) where the plan asks: nothing can run beside it
        self.fill = FillSpin(device) if self.cuda and plan.spin_fills_gpu else None
        self.empty_cache = self.flush.zero_ if plan.flush == "write" else lambda: _sum(self.flush)
        self.reset_l2 = reset_persisting_l2 if self.cuda and reset_persisting_l2 is not None else lambda: 0

    def __call__(self, fn: Callable[..., object], inputs: list) -> tuple[CallTimes, object]:
        self.reset_l2()  # (before the flush: lines still persisting would survive it)
        self.empty_cache()
        if self.cuda:
            _synchronize(self.device)
            mark = _Event()
            mark.record()
            mark.synchronize()
            # the same wait as after the call, nothing left to wait for; at most the tolerance, so that GPU work
            # a solution's thread puts here cannot hide more of what its call leaves behind
            idle_ms = min(max(_synchronize_excess(self.device), 0.0), OFFSTREAM_TOLERANCE_MS)
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            if self.fill is not None:   # the GPU is busy while the host issues the call: its launch latency is hidden
                self.fill.spin(SPIN_NS)
            else:
                _sleep(self.spin)
            start.record()
            t0 = _perf_counter_ns()
            out = fn(*inputs)
            host_ms = (_perf_counter_ns() - t0) / 1e6
            end.record()
            end.synchronize()
            left_ms = _synchronize_excess(self.device) - idle_ms
            self.reset_l2()  # what the call marked persisting does not hold L2 while the next side is timed
            return CallTimes(start.elapsed_time(end), host_ms, left_ms), out
        t0 = _perf_counter_ns()
        out = fn(*inputs)
        host_ms = (_perf_counter_ns() - t0) / 1e6
        return CallTimes(host_ms, host_ms, 0.0), out


def drive(call: Callable[[int], CallTimes], plan: TimingPlan, check: Callable[[int], None] | None = None,
          checks: int = 0, clock: Callable[[], int] = _perf_counter_ns) -> Run:
    """The timing loop's decisions, taken where `clock` is trusted: `call(i)` makes call i (inputs of
    its own, drawn after the request, so nothing is known of them before) and returns its figures;
    this function stamps each with its own wall time. Warm-up until `min_warmup` calls and
    `warmup_s` have passed; then as many timed calls as `budget_s` allows by the warm-up's median
    wall time (within min_runs..max_runs). One slow call neither ends nor shortens the loop: it is
    cut short only where the median call times the calls made is past the wall limit (a slow draw).
    `check(i)`, called right after call i returned and before the next is asked for, has its
    output checked: each timed call with probability checks/runs, the last always, and where fewer
    than `checks` landed, as many more calls as are missing, each checked (they are asked for like
    any other, so they cannot be told apart when they run)."""
    rng = secrets.SystemRandom()
    made = 0

    def one() -> CallTimes:
        nonlocal made
        t0 = clock()
        times = call(made)
        made += 1
        return replace(times, wall_ms=(clock() - t0) / 1e6)

    warm: list[CallTimes] = []
    t_warm = clock()
    while len(warm) < plan.min_warmup or (clock() - t_warm) / 1e9 < plan.warmup_s:
        warm.append(one())
        if len(warm) >= 50:
            break
    est = max(_median([c.wall_ms for c in warm]), 1e-3)
    runs = int(min(plan.max_runs, max(plan.min_runs, plan.budget_s * 1000 / est)))
    wall_limit_ms = (3 * plan.budget_s + 5) * 1000
    p = min(1.0, checks / runs) if check is not None else 0.0
    timed: list[CallTimes] = []
    checked: list[int] = []
    cut = False
    spent_ms = 0.0
    while len(timed) < runs:
        timed.append(one())
        spent_ms += timed[-1].wall_ms
        last = len(timed) == runs
        # half the calls take at least the median, so median * count <= 2 * the total: the median
        # (a sort) is taken only once the total could put it past the limit
        if len(timed) >= plan.min_runs and not last and 2 * spent_ms > wall_limit_ms and \
                _median([c.wall_ms for c in timed]) * len(timed) > wall_limit_ms:
            cut = last = True
        if check is not None and (last or rng.random() < p):
            check(made - 1)
            checked.append(made - 1)
        if cut:
            break
    if check is not None:
        while len(checked) < checks + 1:  # the last, and `checks` more
            one()
            check(made - 1)
            checked.append(made - 1)
    return Run(timed, warm, checked, cut)


def host_floor(calls: Sequence[CallTimes], cuda: bool) -> float:
    """The host's time to issue a call that no GPU sample goes below: the run's 10th percentile of those (0 on the
    CPU, where a sample is the host's time)."""
    return sorted(c.host_ms for c in calls)[len(calls) // 10] if cuda else 0.0


def samples_of(calls: Sequence[CallTimes], cuda: bool) -> tuple[list[float], float]:
    """Each call's sample from its own figures, and the mean off-stream time charged a call: on
    the GPU a sample is never less than the host's time to issue the call (the run's 10th
    percentile of those), and the work each call left on other streams is charged to that call where it passes the
    noise of honest calls, by as much as it passes it."""
    floor = host_floor(calls, cuda)
    own = [max(c.device_ms, floor) for c in calls]
    tolerance = max(OFFSTREAM_TOLERANCE_MS, OFFSTREAM_TOLERANCE_SHARE * sorted(own)[len(own) // 2])
    # only what lies beyond the noise is charged: charged whole once past it, an honest replay's 13.5 us of a 265 us
    # call (the bound 13.25 us) read 5% slow for a whole run (H200, 2026-11-29: the demo's modes of 5-8%, either
    # side). Each call carries its own: one run-wide (trimmed) mean added to every sample let a solution that left
    # all its work on a side stream in 3 calls of 5 (their own time only the host floor) be charged 5/8 of it in the
    # calls that make the median: 1.5x its true speed, inside the watch's tolerance for calls of a few hundred us
    # (review of 4b13e25); a call gains at most the bound
    charged = [max(c.left_ms - tolerance, 0.0) for c in calls]
    return [x + y for x, y in zip(own, charged)], sum(charged) / len(charged)


def stats_of(calls: Sequence[CallTimes], cuda: bool) -> TimingStats:
    """A run's statistics from its calls' own figures (`samples_of`)."""
    samples, offstream = samples_of(calls, cuda)
    return TimingStats.from_samples(samples, offstream_ms=offstream)


def time_callable(fn: Callable[..., object], draw: Callable[[int], list], device: torch.device,
                  plan: TimingPlan = TimingPlan()) -> Timed:
    """Time `fn(*draw(i))` for i = 0, 1, ... in this process (trusted code, such as the baselines):
    the loop of `drive` around a `CallTimer`, `draw` run before each call (untimed by
    the timer, inside the call's wall time), the stats, and the last output and its index."""
    timer = CallTimer(device, plan)
    last: dict = {}

    def call(i: int) -> CallTimes:
        last.clear()  # the previous output's memory is free before the next inputs are drawn
        times, last["out"] = timer(fn, draw(i))
        last["index"] = i
        return times

    with torch.no_grad():
        run = drive(call, plan)
        if device.type == "cuda":
            _synchronize(device)
    return Timed(stats_of(run.calls, device.type == "cuda"), last.get("out"), last.get("index", -1), run)


@contextmanager
def as_timer() -> Iterator[None]:
    """The calling thread, for the block, at nice 0 where it may raise its priority (root) and on
    the timing cores where some are set aside, then back as it was.

    Ray runs its workers at nice 15, and a baseline timed in one would otherwise give the CPU to
    any process of normal priority: a host-bound model's time would grow with the machine's load,
    as the harness's children's did before they were started at nice 0 (sandbox/isolation.py).
    And the processes that time baselines (the evaluation service's evaluators, the reference
    workers) live on the cores where everything else starts, builds and compiles, while a solution
    is timed on cores of its own: on the H100 (2026-11-26) level-3 eager medians taken that way
    were up to 1.6x those of a process alone on the machine."""
    before = os.getpriority(os.PRIO_PROCESS, 0)  # on Linux, of this thread
    raised = False
    if before > 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
            raised = True
        except OSError:  # raising it needs root: the time is taken at the priority the thread has
            pass
    cores, moved_from = timing_cores(), None
    if cores and hasattr(os, "sched_setaffinity"):
        try:
            moved_from = os.sched_getaffinity(0)  # pid 0: on Linux, this thread
            os.sched_setaffinity(0, cores)
        except OSError:  # cores outside this process's cpuset: timed where it runs
            moved_from = None
    try:
        yield
    finally:
        if moved_from is not None:
            os.sched_setaffinity(0, moved_from)
        if raised:
            os.setpriority(os.PRIO_PROCESS, 0, before)  # lowering one's own priority is always allowed


# What the harness's own clock may see beyond the harness's own work in a call before a timing
# figure reported by the solution's process is taken for a lie: a share of the call, and the
# larger of a floor, four times the spread of that work between calls, and a share of the work
# itself (its noise grows with it: on the 2-core CPU under load the flush and draw, 10-17 ms a
# call, moved by 1-2 ms between windows; 2026-11-26). On the CPU that work is not the same in the two
# processes: the 64 MB flush read 2.9-3.0 ms a call in the reference worker and 4.2-5.0 ms in the
# solution's child of the same evaluation, honest solutions both (2026-11-28, this 2-core VM; 1.4 ms
# in a process alone), so an honest child's calls showed up to 0.8x the reference's work beyond its
# own figures, and twice in a row in a CI run. The CPU tolerance is therefore the whole of that work:
# a lie on the CPU is named only where it hides more than the harness's own work a call.
WATCH_SHARE = 0.05
WATCH_FLOOR_MS = {"cuda": 0.02, "cpu": 0.1}
WATCH_OVERHEAD_SHARE = {"cuda": 0.1, "cpu": 1.0}
WATCH_Z = 4.0


@dataclass(frozen=True)
class Watch:
    """The harness's own view of a solution's timing: the wall time of its calls (stamped by the
    harness around each request) less the harness's own work in a call, as a trusted worker's
    calls of the same task show it. `ok`: the figure the solution's process reported is not
    less than that view by more than `tolerance_ms`."""

    reported_ms: float
    seen_ms: float
    overhead_ms: float
    tolerance_ms: float

    @property
    def ok(self) -> bool:
        return self.reported_ms >= self.seen_ms - self.tolerance_ms

    def to_dict(self) -> dict:
        return {k: round(v, 4) for k, v in asdict(self).items()} | {"ok": self.ok}


def watch(reported: TimingStats, calls: Sequence[CallTimes], trusted: Sequence[CallTimes], device_type: str) -> Watch:
    """The solution's reported median against the harness's clock (see Watch): the overhead of a
    call is wall minus claimed time on the trusted worker's calls (same task, same inputs, same
    timer). Its spread (median absolute deviation) widens the tolerance, and so does the standard
    error of the difference of the two medians (WATCH_Z of them): few trusted calls, or calls of
    either side spread by load, make the comparison itself uncertain."""
    over = [c.wall_ms - c.claimed_ms - c.extra_ms for c in trusted]
    overhead = _median(over)
    spread = _median([abs(o - overhead) for o in over])
    gaps = [c.wall_ms - c.claimed_ms for c in calls]
    gap = _median(gaps)
    sigma_sol = 1.4826 * _median([abs(g - gap) for g in gaps])
    se = 1.2533 * math.sqrt((1.4826 * spread) ** 2 / max(1, len(over)) + sigma_sol ** 2 / max(1, len(gaps)))
    seen = _median([c.wall_ms for c in calls]) - overhead
    tolerance = WATCH_SHARE * max(seen, 0.0) + max(WATCH_FLOOR_MS.get(device_type, 0.1), 4 * spread, WATCH_Z * se,
                                                    WATCH_OVERHEAD_SHARE.get(device_type, 0.25) * overhead)
    return Watch(reported.median_ms, seen, overhead, tolerance)
