"""measure/fill.py: the spin that holds every SM. On the CPU: its PTX assembles for the GPUs the judge runs on
(where CUDA's ptxas is present) and its grid takes every thread slot. On the GPU: it spins as long as asked, and
work a call puts on a stream that never waits for the caller's shows in the call's sample behind it, where beside
the one-thread spin it can be done before the timer's start event."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

from cuda_agent.devices import lock_name
from cuda_agent.measure import TimingPlan, device_lock
from cuda_agent.measure.fill import PTX, THREADS, FillSpin, grid_for
from cuda_agent.measure.timing import CallTimer, samples_of


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="CUDA's ptxas is not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_ptx_assembles_for_the_gpus_the_judge_runs_on(tmp_path, arch):
    src = tmp_path / "fill.ptx"
    src.write_bytes(PTX)
    done = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "fill.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "0 bytes spill" in done.stderr
    # its blocks are limited by threads alone: 2,048 threads an SM of these registers fit in an SM's 65,536
    registers = int(re.search(r"Used (\d+) registers", done.stderr).group(1))
    assert registers * 2048 <= 65536, done.stderr


def test_the_grid_takes_every_thread_slot_of_every_sm():
    assert THREADS == 1024
    assert grid_for(132, 2048) == (264, 1024)   # H100 and H200 SXM: 132 SMs of 2,048 threads
    assert grid_for(108, 2048) == (216, 1024) and grid_for(10, 1024) == (10, 1024)
    assert grid_for(58, 1536) == (116, 768)     # L4, L40S, RTX 4090 (sm_89): 1,536 threads an SM, none left free
    for sms, per_sm in ((132, 2048), (58, 1536), (10, 1024)):
        blocks, threads = grid_for(sms, per_sm)
        assert blocks * threads == sms * per_sm and threads <= THREADS and threads % 32 == 0


@pytest.fixture
def gpu_alone():
    with device_lock(lock_name("cuda")):
        yield torch.device("cuda")


@pytest.mark.cuda
def test_the_fill_spins_as_long_as_asked(gpu_alone):
    fill = FillSpin(gpu_alone)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fill.spin(50_000)   # the first launch loads it
    ms = []
    for _ in range(5):
        start.record()
        fill.spin(200_000)
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    assert 0.19 < sorted(ms)[2] < 0.3, ms


@pytest.mark.cuda
def test_work_on_a_stream_that_never_waits_is_seen_behind_the_fill_and_can_hide_beside_one_thread(gpu_alone):
    """Three passes of relu(x * a + b) over 32 MB on a side stream that never waits for the caller's (the hack
    corpus's relaxed_stream_during_spin): the same work made on the caller's stream reads T. Behind the fill the hidden
    calls read about T, their work charged after the start event. Behind the one-thread spin they read far less, their
    work done before the start event."""
    side = torch.cuda.Stream()
    x = torch.randn(1 << 23, device=gpu_alone)

    def work(v):
        for _ in range(3):
            y = torch.relu(v * 1.5 + 0.5)
        return y

    def hidden(v):
        with torch.cuda.stream(side):
            return work(v)

    def median_sample(fn, fill: bool) -> float:
        timer = CallTimer(gpu_alone, TimingPlan(spin_fills_gpu=fill))
        for _ in range(5):
            timer(fn, [x])
        samples, _ = samples_of([timer(fn, [x])[0] for _ in range(40)], True)
        return sorted(samples)[20] * 1000

    plain, plain_fill = median_sample(work, False), median_sample(work, True)
    behind_fill, beside_one = median_sample(hidden, True), median_sample(hidden, False)
    read = (f"the work on the caller's stream {plain:.1f} us (behind the fill {plain_fill:.1f} us); hidden on a side "
            f"stream: behind the fill {behind_fill:.1f} us, beside the one-thread spin {beside_one:.1f} us")
    assert abs(plain_fill / plain - 1) < 0.03, read          # honest work reads the same behind either spin
    assert behind_fill > 0.9 * plain, read                    # the fill leaves no room: the hidden work is charged
    assert beside_one < 0.5 * plain, f"no hole beside the one-thread spin on this GPU? {read}"


@pytest.mark.cuda
def test_no_thread_slot_is_left_beside_the_fill(gpu_alone):
    """The sharpest probe of a gap: one thread of one block (torch.cuda._sleep) queued on a side stream of the highest
    priority after the fill. Were one thread slot free on any SM it would run there and end long before the fill;
    beside the one-thread spin it does. (Priorities order pending blocks, they do not preempt running ones.)"""
    fill, side = FillSpin(gpu_alone), torch.cuda.Stream(priority=-1)
    fill.spin(50_000)
    torch.cuda._sleep(1000)

    def probe_end_minus_spin_end(spin) -> float:
        spun, probed = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        spin()
        spun.record()
        with torch.cuda.stream(side):
            torch.cuda._sleep(1000)   # about a microsecond
            probed.record()
        torch.cuda.synchronize()
        return spun.elapsed_time(probed)

    cycles = CallTimer(gpu_alone).spin * 10   # about 2 ms
    behind_fill = [probe_end_minus_spin_end(lambda: fill.spin(2_000_000)) for _ in range(5)]
    beside_one = [probe_end_minus_spin_end(lambda: torch.cuda._sleep(cycles)) for _ in range(5)]
    assert min(behind_fill) > -0.05, behind_fill    # done only once the fill is (within the events' resolution)
    assert max(beside_one) < -1.0, beside_one       # done while the one-thread spin still ran
