"""The other sandbox users' processes on the timed GPU, stopped while an evaluation times (sandbox/bystanders.py)."""

from __future__ import annotations

import os
import site
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox import bystanders_stopped, gpu_bystanders

from .test_isolation import SPINNER, _cpu_ticks, _state_of, root_only, sandboxed

HACKS = Path(__file__).resolve().parent.parent / "hacks"


def _continued(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while _state_of(pid) == "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    return _state_of(pid) in "RS"


@root_only
def test_only_other_sandbox_users_are_bystanders():
    """Of the GPU's holders, the reference worker (root) and the timed child's user are never stopped."""
    with sandboxed(SPINNER) as spinner:
        uid = spinner.slot.user.uid
        holders = {spinner.pid: uid, os.getpid(): 0, 999_999: None}
        assert gpu_bystanders(holders, spare=[]) == [spinner.pid]
        assert gpu_bystanders(holders, spare=[uid]) == []


@root_only
def test_a_bystander_is_stopped_for_the_block_and_continued_after_however_it_ends():
    with sandboxed(SPINNER) as spinner:
        with bystanders_stopped([spinner.pid]) as seen:
            assert (seen.stopped, seen.running) == (1, 0) and _state_of(spinner.pid) == "T"
            ticks = _cpu_ticks(spinner.pid)
            time.sleep(0.1)
            assert _cpu_ticks(spinner.pid) == ticks, "the bystander ran while stopped"
        assert _continued(spinner.pid)
        with pytest.raises(RuntimeError), bystanders_stopped([spinner.pid]):
            assert _state_of(spinner.pid) == "T"
            raise RuntimeError("the timing failed")
        assert _continued(spinner.pid)


@root_only
def test_a_bystander_gone_before_its_stop_is_no_error():
    with sandboxed(SPINNER) as spinner:
        pid = spinner.pid
        spinner.slot.kill_processes()
    with bystanders_stopped([pid]) as seen:
        assert (seen.stopped, seen.running) == (0, 0)


# A sandbox user's program that keeps ~1 ms kernels on the GPU (waiting for each: its queue stays short).
GPU_SPINNER = f"""
import os, sys
sys.path[:0] = {site.getsitepackages()!r}
import torch
torch.cuda._sleep(1000); torch.cuda.synchronize()
os.write(int(sys.argv[1]), b"%d\\n" % os.getpid())
while True:
    torch.cuda._sleep(2_000_000)
    torch.cuda.synchronize()
"""


@root_only
@pytest.mark.cuda
def test_another_users_kernels_are_stopped_while_an_honest_solution_is_timed():
    """A process of another sandbox user keeps the GPU busy (another evaluation's daemon, an agent's test run)
    while the demo's honest kernel is timed: it is stopped for the timing, continued after, and the verdict
    is the honest one."""
    from cuda_agent.harness import EvalConfig, TimingPlan, evaluate
    from cuda_agent.tasks import load_task

    with sandboxed(GPU_SPINNER) as spinner:
        r = evaluate(load_task("scale_bias_relu"), HACKS / "cuda" / "honest_fused",
                     EvalConfig(device="cuda", timing=TimingPlan(budget_s=1.0)))
        assert r.reward >= 2, r.reason
        assert "gpu_contexts_unchecked" not in r.flags   # NVML named the spinner under its pid
        seen = r.details["bystanders"]   # the spinner, and under -n 8 the idle children of other tests with contexts
        assert seen["stopped"] >= 1 and seen["running"] == 0, seen
        assert _continued(spinner.pid)


@root_only
def test_each_look_stops_the_bystanders_not_stopped_yet_and_the_run_continues_them_all():
    """profiling._stop_bystanders, called before every block: a context opened after the first look (a daemon
    started late) is stopped at the next; none is stopped twice; the timing's end continues every one."""
    from contextlib import ExitStack

    from cuda_agent.harness.profiling import _stop_bystanders
    from cuda_agent.harness.result import EvalResult
    from cuda_agent.sandbox.gpu_contexts import Look

    with sandboxed(SPINNER) as first, sandboxed(SPINNER) as late:
        holders = {first.pid: first.slot.user.uid}

        class Contexts:
            def look(self):
                return Look(live=dict(holders))

        result, others = EvalResult(task="t", reward=-1.0, correct=False, stage="profile", reason=""), ExitStack()
        with others:
            _stop_bystanders(others, Contexts(), child_uid=0, result=result)
            assert _state_of(first.pid) == "T" and _state_of(late.pid) != "T"
            holders[late.pid] = late.slot.user.uid
            _stop_bystanders(others, Contexts(), child_uid=0, result=result)
            _stop_bystanders(others, Contexts(), child_uid=late.slot.user.uid, result=result)   # spared: no change
            assert _state_of(first.pid) == "T" and _state_of(late.pid) == "T"
            assert result.details["bystanders"] == {"stopped": 2, "running": 0, "pids": [first.pid, late.pid]}
        assert _continued(first.pid) and _continued(late.pid)
