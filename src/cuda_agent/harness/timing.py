"""Timing, kept apart from the evaluation logic: one function times any callable the same way for
eager, torch.compile and a solution.

CUDA: events around the call with a device-wide synchronize before the end event, so work left on
other streams is counted; L2 flushed before each iteration; warm-up excluded; the inputs' contents
alternate between two sets (copied in, untimed) so a result cached by pointer or shape is caught by
checking the last output. CPU: the same loop with a monotonic clock and a cache-sized flush.
"""

from __future__ import annotations

import fcntl
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


def time_callable(fn: Callable[..., object], input_sets: list[list], device: torch.device,
                  plan: TimingPlan = TimingPlan()) -> tuple[TimingStats, object, int]:
    """Time `fn(*inputs)`; returns the stats, the last output and which input set it was run on.

    Before each iteration the next input set is copied into fixed buffers (untimed) and the cache
    flushed, so every call sees new contents at the same addresses."""
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in input_sets[0]]
    flush = _flush_buffer(device)
    cuda = device.type == "cuda"
    sync = (lambda: _synchronize(device)) if cuda else (lambda: None)

    def one(i: int) -> tuple[float, object]:
        _copy_into(buffers, input_sets[i % len(input_sets)])
        flush.zero_()
        sync()
        if cuda:
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            start.record()
            out = fn(*buffers)
            _synchronize(device)
            end.record()
            end.synchronize()
            return start.elapsed_time(end), out
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


@contextmanager
def device_lock(lock_dir: Path, key: str) -> Iterator[None]:
    """Exclusive use of one device (`key`, e.g. "cuda0") for timing, across processes: evaluations
    running in parallel share GPUs, but never time at once on the same one."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{key}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
