"""The other sandbox users' processes on the timed GPU, stopped while an evaluation times (sandbox/bystanders.py)."""

from __future__ import annotations

import os
import site
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox import Bystanders

from .test_isolation import SPINNER, _continued, _cpu_ticks, _state_of, root_only, sandboxed

HACKS = Path(__file__).resolve().parent.parent / "hacks"


@root_only
def test_only_other_sandbox_users_are_bystanders():
    """Of the GPU's holders, the reference worker (root), the timed child's user and a pid whose process is not
    the user the driver's look said (reused since) are never stopped."""
    from cuda_agent.sandbox import eval_uids

    with sandboxed(SPINNER) as spinner:
        uid = spinner.slot.user.uid
        another = next(u for u in eval_uids() if u != uid)   # a sandbox user the spinner is not
        for spare, said in (([uid], uid), ([], another)):
            with Bystanders(spare=spare) as others:
                others.stop({spinner.pid: said, os.getpid(): 0, 999_999: None})
                assert others.pids == [] and _state_of(spinner.pid) != "T"


@root_only
def test_a_bystander_is_stopped_for_the_run_stopped_again_each_block_and_continued_after_however_it_ends():
    import signal

    with sandboxed(SPINNER) as spinner:
        holders = {spinner.pid: spinner.slot.user.uid}
        with Bystanders(spare=[]) as others:
            assert others.stop(holders) == 0 and others.pids == [spinner.pid] and _state_of(spinner.pid) == "T"
            ticks = _cpu_ticks(spinner.pid)
            time.sleep(0.1)
            assert _cpu_ticks(spinner.pid) == ticks, "the bystander ran while stopped"
            os.kill(spinner.pid, signal.SIGCONT)   # a process of its user without a context continues it
            assert _continued(spinner.pid)
            assert others.stop({}) == 0 and _state_of(spinner.pid) == "T"   # the next block stops it again
        assert _continued(spinner.pid)
        with pytest.raises(RuntimeError), Bystanders(spare=[]) as others:
            others.stop(holders)
            assert _state_of(spinner.pid) == "T"
            raise RuntimeError("the timing failed")
        assert _continued(spinner.pid)


@root_only
def test_a_bystander_gone_before_its_stop_is_no_error():
    with sandboxed(SPINNER) as spinner:
        pid, uid = spinner.pid, spinner.slot.user.uid
        spinner.slot.kill_processes()
    with Bystanders(spare=[]) as others:
        assert others.stop({pid: uid}) == 0 and others.pids == []


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
        assert seen["stopped"] >= 1 and seen["ran"] == 0, seen
        assert _continued(spinner.pid)


@root_only
def test_each_block_stops_the_bystanders_new_since_the_last_and_a_second_run_stops_them_again():
    """profiling._stop_bystanders, before every block: a context opened after the first look (a daemon started
    late) is stopped at the next; the run's end continues every one; a second run of the same evaluation (a
    retimed watch, a remeasured speed-up) stops them again (2026-11-28 review: it once skipped those it had held)."""
    from cuda_agent.harness.profiling import _stop_bystanders
    from cuda_agent.harness.result import EvalResult
    from cuda_agent.sandbox.gpu_contexts import Look

    with sandboxed(SPINNER) as first, sandboxed(SPINNER) as late:
        holders = {first.pid: first.slot.user.uid}

        class Contexts:
            def look(self):
                return Look(live=dict(holders))

        result = EvalResult(task="t", reward=-1.0, correct=False, stage="profile", reason="")
        with Bystanders(spare=[]) as others:
            _stop_bystanders(others, Contexts(), result)
            assert _state_of(first.pid) == "T" and _state_of(late.pid) != "T"
            holders[late.pid] = late.slot.user.uid
            _stop_bystanders(others, Contexts(), result)
            assert _state_of(first.pid) == "T" and _state_of(late.pid) == "T"
        assert _continued(first.pid) and _continued(late.pid)
        with Bystanders(spare=[]) as again:
            _stop_bystanders(again, Contexts(), result)
            assert _state_of(first.pid) == "T" and _state_of(late.pid) == "T"
        assert _continued(first.pid) and _continued(late.pid)
        assert result.details["bystanders"] == {"stopped": 2, "ran": 0}
