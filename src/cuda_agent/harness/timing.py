"""Timing, kept apart from the evaluation logic: one function times any callable the same way for
eager, torch.compile and a solution.

CUDA: events around the call on the current stream, the call issued while the GPU spins on a short
wait kernel (so the launch latency of the first kernel is not in the time; a sample is never less
than the host's time to issue the call); then a device-wide synchronize, and whatever time it
takes beyond an idle device's synchronize (work the call left on other streams) is added, so side
streams are counted without charging every call the synchronize's own latency. L2
flushed before each iteration; warm-up excluded; the inputs' contents alternate between two sets
(copied in, untimed) so a result cached by pointer or shape is caught by checking the last output.
CPU: the same loop with a monotonic clock and a cache-sized flush.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from cuda_agent.harness.result import TimingStats

_CPU_FLUSH_BYTES = 64 << 20
# Bound at import, before any solution code runs in the child: replacing time.perf_counter_ns or
# torch.cuda.Event afterwards cannot change the clock the harness reads.
_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_sleep = torch.cuda._sleep
# Before each timed call the GPU spins this long, so the call's kernels are queued behind the spin
# and run back to back: the time is the device's, never less than the host took to issue the call.
SPIN_MS = 0.2


@dataclass(frozen=True)
class TimingPlan:
    min_runs: int = 30
    max_runs: int = 1000
    budget_s: float = 2.0
    warmup_s: float = 0.1
    min_warmup: int = 3


def _flush_buffer(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
        return torch.empty(max(2 * l2, 8 << 20) // 4, dtype=torch.int32, device=device)
    return torch.empty(_CPU_FLUSH_BYTES // 4, dtype=torch.int32)


def _copy_into(dst: list, src: list) -> None:
    for d, s in zip(dst, src):
        if isinstance(d, torch.Tensor):
            d.copy_(s)


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


def _idle_sync_ms(device: torch.device, samples: int = 21) -> float:
    """The median time of a device-wide synchronize with nothing left to wait for."""
    _synchronize(device)
    times = []
    for _ in range(samples):
        t0 = _perf_counter_ns()
        _synchronize(device)
        times.append((_perf_counter_ns() - t0) / 1e6)
    return sorted(times)[len(times) // 2]


def time_callable(fn: Callable[..., object], input_sets: list[list], device: torch.device,
                  plan: TimingPlan = TimingPlan()) -> tuple[TimingStats, object, int]:
    """Time `fn(*inputs)`; returns the stats, the last output and which input set it was run on.

    Before each iteration the next input set is copied into fixed buffers (untimed) and the cache
    flushed, so every call sees new contents at the same addresses."""
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in input_sets[0]]
    flush = _flush_buffer(device)
    cuda = device.type == "cuda"
    sync = (lambda: _synchronize(device)) if cuda else (lambda: None)
    idle_ms = _idle_sync_ms(device) if cuda else 0.0
    spin = _spin_cycles(device, SPIN_MS) if cuda else 0

    def one(i: int) -> tuple[float, object]:
        _copy_into(buffers, input_sets[i % len(input_sets)])
        flush.zero_()
        sync()
        if cuda:
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _sleep(spin)  # the GPU is busy while the host issues the call: its launch latency is hidden
            start.record()
            t0 = _perf_counter_ns()
            out = fn(*buffers)
            host_ms = (_perf_counter_ns() - t0) / 1e6
            end.record()
            end.synchronize()
            t0 = _perf_counter_ns()
            _synchronize(device)  # waits for work the call left on other streams
            left_ms = (_perf_counter_ns() - t0) / 1e6 - idle_ms
            return max(start.elapsed_time(end), host_ms) + max(left_ms, 0.0), out
        t0 = _perf_counter_ns()
        out = fn(*buffers)
        return (_perf_counter_ns() - t0) / 1e6, out

    with torch.no_grad():
        t_warm = time.perf_counter()
        i = 0
        while i < plan.min_warmup or time.perf_counter() - t_warm < plan.warmup_s:
            est, _ = one(i)
            i += 1
            if i >= 50:
                break
        runs = int(min(plan.max_runs, max(plan.min_runs, plan.budget_s * 1000 / max(est, 1e-3))))
        samples, out, last = [], None, 0
        for j in range(runs):
            ms, out = one(j)
            samples.append(ms)
            last = j % len(input_sets)
            if j >= plan.min_runs and sum(samples) > 3 * plan.budget_s * 1000:
                break
        sync()
    return TimingStats.from_samples(samples), out, last


def compile_for_timing(model: torch.nn.Module, inputs: list) -> Callable[..., object]:
    """`torch.compile(model)`, compiled now by one call (under no_grad, as it will be timed), so
    that the compilation (CPU work, seconds) happens before the device is taken for timing."""
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*inputs)
    return compiled


def time_baselines(model: torch.nn.Module, compiled: Callable[..., object], input_sets: list[list],
                   device: torch.device, plan: TimingPlan) -> tuple[TimingStats, TimingStats]:
    """Eager and torch.compile timings of the same model on the same input sets."""
    eager, _, _ = time_callable(model, input_sets, device, plan)
    compiled_stats, _, _ = time_callable(compiled, input_sets, device, plan)
    return eager, compiled_stats


def lock_name(device: str) -> str:
    """The lock of the device this process times on ("cuda0" for the first visible GPU, "cpu0")."""
    return f"{device}{os.environ.get('CUDA_VISIBLE_DEVICES', '0').split(',')[0]}"


@contextmanager
def device_lock(lock_dir: Path, key: str, shared: bool = False) -> Iterator[None]:
    """One device (`key`, e.g. "cuda0") across processes: evaluations running in parallel hold it
    shared while they run on the device, and timing holds it alone, so nothing else runs on the
    GPU while a figure is taken (work of other evaluations would otherwise slow it). A timer waiting
    for it goes first: newcomers queue behind it at a turnstile, so a busy GPU never starves timing."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{key}.turnstile", "a") as gate, open(lock_dir / f"{key}.lock", "a") as f:
        if shared:
            fcntl.flock(gate, fcntl.LOCK_SH)  # passes at once unless a timer is waiting
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(f, fcntl.LOCK_SH)
        else:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(f, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
