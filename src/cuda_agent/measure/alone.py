"""Whether the GPU is the timing process's alone as a baseline window begins.

The harness stops every process of the solution before the baselines are timed (sandbox.Freezer), but a
stop holds threads, not the kernels they queued (2026-11-28, H200, `benchmarks/gpu_owner_probe.py`: a stopped
daemon's queued second ran on beside a 2 ms probe, which read 4.37 ms). Work of another CUDA context shares
the GPU with the baselines by time slices, and they read slow: a speed-up the solution did not earn. The
solution's child synchronizes its whole context after every timed call, so what is left can only be work
queued by a thread of it between its reply and the stop, or by something else on the GPU.

So before a block's windows the reference worker launches a tiny kernel and waits for it from the host, until
`SETTLE_PROBES` in a row come back within `PROBE_IDLE_MS`: while another context holds the GPU, the probe waits
for a time slice (milliseconds) instead of a launch (tens of microseconds). The stopped solution can queue
nothing more, so its leftover work drains and the windows begin after it. A GPU not alone after `MAX_WAIT_S`
is reported, never timed beside.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

PROBE_IDLE_MS = 0.5   # a probe's launch and wait from the host: tens of microseconds on an idle H100/H200
SETTLE_PROBES = 2     # in a row within PROBE_IDLE_MS (one fast probe may fall between two time slices)
MAX_WAIT_S = 2.0      # longer than any honest leftover: an honest child leaves nothing queued
_BACKOFF_S = 0.0005   # between probes while the GPU is busy: not a launch stream of our own beside its work


@dataclass(frozen=True)
class Alone:
    """What the probes saw: `alone` once SETTLE_PROBES in a row read idle; `waited_ms` from the first probe to
    that point (0 when the first ones were idle), `probes` made, `slowest_ms` the slowest of them."""

    alone: bool
    waited_ms: float
    probes: int
    slowest_ms: float

    def to_dict(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def wait_alone(probe: Callable[[], float], max_wait_s: float = MAX_WAIT_S,
               clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep) -> Alone:
    """Calls `probe()` (its latency in ms) until SETTLE_PROBES in a row are within PROBE_IDLE_MS, or until
    `max_wait_s` have passed (then `alone` is False)."""
    t0 = clock()
    idle_in_a_row, probes, slowest = 0, 0, 0.0
    while idle_in_a_row < SETTLE_PROBES:
        ms = probe()
        probes += 1
        slowest = max(slowest, ms)
        if ms <= PROBE_IDLE_MS:
            idle_in_a_row += 1
            continue
        idle_in_a_row = 0
        if clock() - t0 >= max_wait_s:
            break
        sleep(_BACKOFF_S)
    alone = idle_in_a_row >= SETTLE_PROBES
    waited = 0.0 if alone and probes == SETTLE_PROBES else (clock() - t0) * 1e3
    return Alone(alone, waited, probes, slowest)


def gpu_probe(device: torch.device) -> Callable[[], float] | None:
    """The probe on `device` (None off the GPU: a CPU has no other contexts to wait for): one element
    incremented, then the device synchronized, timed on the host in ms."""
    if device.type != "cuda":
        return None
    x = torch.zeros(1, device=device)

    def probe() -> float:
        t0 = time.perf_counter()
        x.add_(1.0)
        torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) * 1e3

    probe()   # the first launch pays for loading the kernel
    return probe
