"""Timing, kept apart from the evaluation logic: one function times any callable the same way for
eager, torch.compile and a solution.

CUDA: events around the call on the current stream, the call issued while the GPU spins on a short
wait kernel (so the launch latency of the first kernel is not in the time). A sample is never less
than the host's time to issue the call, taken as the run's 10th percentile of those times: CPU work
done in every call cannot hide under the spin, and the jitter of the host's Python and dispatch
overhead, which moved small calls' medians by 15-65% between runs, stays out (H100, 2026-11-24:
GPU-event medians agree within 0.5% between runs, and so do these samples).
After each call two device-wide synchronizes: the first waits for work the call left on other
streams, the second finds the device idle; their difference, averaged over the run, is charged to
every sample where it is beyond the noise of honest calls (OFFSTREAM_TOLERANCE_*), so side streams
are counted without charging every call a synchronize's latency and its jitter.
L2 emptied before each call; warm-up excluded. Every call gets inputs of its own, drawn (untimed)
from a seed derived from the run's seed and the call's index, so no two calls see the same
contents: a result cached by pointer, shape or a fingerprint of the contents is wrong at the last
call, whose output the reference checks (it draws the same inputs from the same seed).
CPU: the same loop with a monotonic clock and a cache-sized flush.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from cuda_agent.devices import timing_cores
from cuda_agent.harness.config import TimingPlan
from cuda_agent.harness.lock import alone_within
from cuda_agent.harness.result import TimingStats

_CPU_FLUSH_BYTES = 64 << 20
# Bound at import, before any solution code runs in the child: replacing time.perf_counter_ns or
# torch.cuda.Event afterwards cannot change the clock the harness reads.
_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_sleep = torch.cuda._sleep
_clone, _mem_get_info, _sum = torch.Tensor.clone, torch.cuda.mem_get_info, torch.sum
# Before each timed call the GPU spins this long, so the call's kernels are queued behind the spin
# and run back to back: the time is the device's, never less than the host took to issue the call.
SPIN_MS = 0.2
# Two back-to-back synchronizes after an honest call differ too: 1-5 us on an idle H100 in a quiet
# process, 5-45 us (0.2-4.6% of the call) in the baseline workers of the KernelBench tables
# (2026-11-24). Work left on other streams is charged only beyond the larger of these bounds, so
# honest calls are not charged that noise, and hiding work there gains less than the 5% margin
# the reward asks for.
OFFSTREAM_TOLERANCE_MS = 0.005
OFFSTREAM_TOLERANCE_SHARE = 0.05


def _flush_buffer(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
        return torch.empty(max(2 * l2, 8 << 20) // 4, dtype=torch.int32, device=device)
    return torch.empty(_CPU_FLUSH_BYTES // 4, dtype=torch.int32)


_SEED_MASK = (1 << 62) - 1


def call_seed(run_seed: int, index: int) -> int:
    """The input seed of call `index` of a timing run: every process derives the same one."""
    return (run_seed * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & _SEED_MASK


@dataclass
class Timed:
    """What a timing run gives back: the stats, the last call's output and index, and copies of
    the outputs of the calls chosen by `check_at` (index -> output) that fitted in memory."""

    stats: TimingStats
    output: object
    index: int
    kept: dict[int, object] = field(default_factory=dict)


def _tensors(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def _copy_if_room(out: object, device: torch.device) -> object | None:
    """A copy of `out` (tensors cloned), or None where the device has no room for one: a check of
    a timed output must never make an honest solution run out of memory."""
    if device.type == "cuda":
        need = sum(t.numel() * t.element_size() for t in _tensors(out))
        if need + (1 << 30) > _mem_get_info(device)[0]:
            return None

    def copy(o: object) -> object:
        if isinstance(o, torch.Tensor):
            return _clone(o)
        return type(o)(copy(x) for x in o) if isinstance(o, (list, tuple)) else o

    return copy(out)


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


def _trimmed_mean(values: list[float], cut: float = 0.1) -> float:
    s = sorted(values)
    k = int(len(s) * cut)
    s = s[k:len(s) - k] or s
    return sum(s) / len(s)


def time_callable(fn: Callable[..., object], draw: Callable[[int], list], device: torch.device,
                  plan: TimingPlan = TimingPlan(), check_at: Sequence[float] = ()) -> Timed:
    """Time `fn(*draw(i))` for i = 0, 1, ...: the stats, the last output and the index of the call
    that made it. `draw` runs before each call, untimed (the harness draws new inputs from
    `call_seed(run_seed, i)`), and the cache is flushed after it. `check_at`: fractions in [0, 1)
    of the way through the timed calls whose outputs are also kept (copied after the call,
    untimed), so that a solution skipping work on some calls cannot count on the last one alone
    being checked. The loop stops early once it has min_runs samples and its wall time is far
    beyond the budget (a slow `draw`)."""
    flush = _flush_buffer(device)
    cuda = device.type == "cuda"
    sync = (lambda: _synchronize(device)) if cuda else (lambda: None)
    spin = _spin_cycles(device, SPIN_MS) if cuda else 0

    empty_cache = flush.zero_ if plan.flush == "write" else lambda: _sum(flush)

    def one(i: int) -> tuple[float, float, float, object]:
        """The call's device time, the host's time to issue it, the time its device-wide
        synchronize took beyond an idle one, and its output."""
        inputs = draw(i)
        empty_cache()
        sync()
        if cuda:
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _sleep(spin)  # the GPU is busy while the host issues the call: its launch latency is hidden
            start.record()
            t0 = _perf_counter_ns()
            out = fn(*inputs)
            host_ms = (_perf_counter_ns() - t0) / 1e6
            end.record()
            end.synchronize()
            t0 = _perf_counter_ns()
            _synchronize(device)  # waits for work the call left on other streams
            t1 = _perf_counter_ns()
            _synchronize(device)  # the same with nothing left to wait for
            left_ms = ((t1 - t0) - (_perf_counter_ns() - t1)) / 1e6
            return start.elapsed_time(end), host_ms, left_ms, out
        t0 = _perf_counter_ns()
        out = fn(*inputs)
        host_ms = (_perf_counter_ns() - t0) / 1e6
        return host_ms, host_ms, 0.0, out

    with torch.no_grad():
        t_warm = time.perf_counter()
        i = 0
        while i < plan.min_warmup or time.perf_counter() - t_warm < plan.warmup_s:
            est = max(one(i)[:2])
            i += 1
            if i >= 50:
                break
        runs = int(min(plan.max_runs, max(plan.min_runs, plan.budget_s * 1000 / max(est, 1e-3))))
        wall_limit = 3 * plan.budget_s + 5  # untimed work (drawing inputs, the flush) is bounded too
        t_loop = time.perf_counter()
        samples: list[float] = []
        hosts: list[float] = []
        lefts: list[float] = []
        spent_ms = 0.0
        out: object = None
        chosen = {i + min(runs - 1, int(f * runs)) for f in check_at if 0 <= f < 1}
        kept: dict[int, object] = {}
        for j in range(i, i + runs):
            out = None  # the previous output's memory is free before the next inputs are drawn
            ms, host_ms, left_ms, out = one(j)
            samples.append(ms)
            hosts.append(host_ms)
            lefts.append(left_ms)
            spent_ms += max(ms, host_ms)
            if j in chosen and j != i + runs - 1:
                copied = _copy_if_room(out, device)
                if copied is not None:
                    kept[j] = copied
            if len(samples) >= plan.min_runs and (spent_ms > 3 * plan.budget_s * 1000
                                                  or time.perf_counter() - t_loop > wall_limit):
                break
        sync()
    kept.pop(j, None)  # the loop stopped early at a chosen call: it is the last one, checked anyway
    host_floor = sorted(hosts)[len(hosts) // 10] if cuda else 0.0  # on the CPU a sample is the host's time
    own = [max(x, host_floor) for x in samples]
    offstream = _trimmed_mean(lefts)
    tolerance = max(OFFSTREAM_TOLERANCE_MS, OFFSTREAM_TOLERANCE_SHARE * sorted(own)[len(own) // 2])
    offstream = offstream if offstream > tolerance else 0.0
    stats = TimingStats.from_samples([x + offstream for x in own], offstream_ms=offstream)
    return Timed(stats, out, j, kept)


def compile_for_timing(model: torch.nn.Module, inputs: list, alone: str | None = None,
                       lock_dir: Path | None = None) -> Callable[..., object]:
    """`torch.compile(model)`, compiled now by one call (under no_grad, as it will be timed), so
    that the compilation (CPU work, seconds) happens before the device is taken for timing. The
    caller holds the device's lock shared meanwhile (lock.beside_timing), so no timer runs beside it.
    `alone`: that lock's key; Inductor's autotuner then benchmarks its kernels' configurations (on
    the first call) holding the device alone, as a timer does, since timed beside other processes'
    GPU work a slower configuration can win and stay. (It did not cure the one case measured: in a
    6-worker bench on the H100, 30_SwinTransformerV2 compiles to 4.7 or 7.0 ms, alone always 4.7:
    benchmarks/RESULTS.md, 2026-11-26.)"""
    compiled = torch.compile(model)
    with torch.no_grad(), autotune_alone(alone, lock_dir):
        compiled(*inputs)
    return compiled


_autotune = threading.local()


def _guard_autotuner(cls: type) -> None:
    """Wrap `cls.benchmark_all_configs` (Inductor's CachingAutotuner: it times each candidate
    configuration of a kernel, at the kernel's first launch) so that, inside autotune_alone(), the
    first benchmark takes the device alone and keeps it to the end of the block."""
    original = cls.__dict__.get("benchmark_all_configs")
    if original is None or getattr(original, "_cuda_agent_guard", False):
        return

    def benchmark_all_configs(self, *args, **kwargs):
        stack = getattr(_autotune, "stack", None)
        if stack is not None and not _autotune.alone:
            stack.enter_context(alone_within(_autotune.key, _autotune.lock_dir))
            _autotune.alone = True
        return original(self, *args, **kwargs)

    benchmark_all_configs._cuda_agent_guard = True  # type: ignore[attr-defined]
    cls.benchmark_all_configs = benchmark_all_configs


@contextmanager
def autotune_alone(key: str | None, lock_dir: Path | None = None) -> Iterator[None]:
    """Inside the block (a compiled model's first call), Inductor's autotuning benchmarks hold lock
    `key` alone: from the first one to the end of the block, since the kernels of a compiled graph
    are benchmarked one after the other as it runs, and taking the device alone for each would wait
    for every other compile each time (None: as Inductor does them). Where Inductor has no such
    autotuner (another torch), nothing changes."""
    if key is None:
        yield
        return
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:
        CachingAutotuner = None
    if CachingAutotuner is not None:
        _guard_autotuner(CachingAutotuner)
    before = tuple(getattr(_autotune, k, None) for k in ("key", "lock_dir", "stack", "alone"))
    with ExitStack() as stack:
        _autotune.key, _autotune.lock_dir, _autotune.stack, _autotune.alone = key, lock_dir, stack, False
        try:
            yield
        finally:
            _autotune.key, _autotune.lock_dir, _autotune.stack, _autotune.alone = before


@contextmanager
def as_timer() -> Iterator[None]:
    """The calling thread, for the block, at nice 0 where it may raise its priority (root) and on
    the timing cores where some are set aside, then back as it was.

    Ray runs its workers at nice 15, and a baseline timed in one (bench's tables, as a job of the
    service) would otherwise give the CPU to any process of normal priority: a host-bound model's
    time would grow with the machine's load, as the harness's children's did before they were
    started at nice 0 (sandbox.py). And the processes that time baselines (the service's
    evaluators, the reference workers) live on the cores where everything else starts, builds and
    compiles, while a solution is timed on cores of its own: on the H100 (2026-11-26) level-3
    eager medians taken that way were up to 1.6x those of a process alone on the machine."""
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
