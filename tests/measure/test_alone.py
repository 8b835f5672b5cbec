"""Waiting for the GPU alone before the baselines' windows (measure/alone.py): the rule on recorded probe
latencies (CPU), and on the device against another process's queued kernels (CUDA)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Callable

import pytest
import torch

from cuda_agent.measure import gpu_probe, wait_alone
from cuda_agent.measure.alone import PROBE_IDLE_MS, SETTLE_PROBES


class Clock:
    """A clock that moves by what each probe takes and each sleep lasts."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def probes(clock: Clock, latencies_ms: list[float]):
    it = iter(latencies_ms)

    def probe() -> float:
        ms = next(it)
        clock.now += ms / 1e3
        return ms
    return probe


def test_an_idle_gpu_is_alone_at_once():
    clock = Clock()
    seen = wait_alone(probes(clock, [0.03] * SETTLE_PROBES), clock=clock, sleep=clock.sleep)
    assert seen.alone and seen.waited_ms == 0.0 and seen.probes == SETTLE_PROBES


def test_leftover_work_is_waited_for_and_the_wait_is_reported():
    clock = Clock()
    # two 2 ms time slices of another context, one fast probe between them (not yet settled), then idle
    seen = wait_alone(probes(clock, [2.0, 0.03, 2.0, 0.03, 0.03]), clock=clock, sleep=clock.sleep)
    assert seen.alone and seen.probes == 5 and seen.slowest_ms == 2.0
    assert seen.waited_ms >= 4.0


def test_a_gpu_never_alone_is_reported_after_the_limit():
    clock = Clock()
    seen = wait_alone(probes(clock, [PROBE_IDLE_MS * 4] * 10_000), max_wait_s=0.5, clock=clock, sleep=clock.sleep)
    assert not seen.alone and seen.waited_ms >= 500 and seen.probes < 10_000


def test_off_the_gpu_there_is_nothing_to_wait_for():
    assert gpu_probe(torch.device("cpu")) is None


SPINNER = r"""
import sys, torch
torch.cuda._sleep(1000); torch.cuda.synchronize()
for _ in range(int(sys.argv[1])):
    torch.cuda._sleep(20_000_000)   # about 10 ms each
print("queued", flush=True)
sys.stdin.read()   # stays alive, its kernels running, until told
"""


def _as_the_timer_holds_the_gpu(stack: ExitStack) -> Callable[[], int]:
    """What the harness's timing does before it waits for the GPU alone (harness/profiling.py): the device's lock
    held alone, so other evaluations' runs and compiles drain, and every other sandbox user's process with a
    context on this GPU stopped (sandbox.Bystanders; again before each wait: returned). Under `-n 8` other tests'
    evaluations and the corpus's daemons share the GPU: without these the GPU was never alone in 5 s (2x H200,
    2026-11-28). The spinner below runs as this test's own user, never stopped."""
    from cuda_agent.devices import lock_name
    from cuda_agent.harness.workers.reference import _uuid
    from cuda_agent.measure import device_lock
    from cuda_agent.sandbox import Bystanders, ContextWatch

    stack.enter_context(device_lock(lock_name("cuda"), shared=False))
    contexts = ContextWatch([os.getpid()])   # this process's context, made by gpu_probe, names the namespace's pids
    contexts.on(_uuid(torch.device("cuda")))
    others = stack.enter_context(Bystanders(spare=[]))
    return lambda: others.stop(contexts.look().live)


@pytest.mark.cuda
def test_on_the_device_another_processes_queued_kernels_are_waited_for():
    probe = gpu_probe(torch.device("cuda"))
    with ExitStack() as stack:
        stop_others = _as_the_timer_holds_the_gpu(stack)
        stop_others()
        assert wait_alone(probe).alone   # nothing else on the GPU
        spinner = subprocess.Popen([sys.executable, "-c", SPINNER, "30"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        try:
            assert spinner.stdout.readline().strip() == "queued"
            stop_others()
            t0 = time.perf_counter()
            seen = wait_alone(probe, max_wait_s=5.0)
            took = time.perf_counter() - t0
            assert seen.alone and seen.waited_ms > 50 and seen.slowest_ms > PROBE_IDLE_MS, seen
            assert took > 0.05, took   # the queued ~300 ms ran while it waited (some of it before the first probe)
            assert wait_alone(probe).waited_ms == 0.0   # and after it, at once
        finally:
            spinner.stdin.close()
            spinner.wait(30)
