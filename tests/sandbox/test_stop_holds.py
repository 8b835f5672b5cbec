"""A bystander stop (another evaluation timing on the GPU) never continues a process that a freezer holds stopped
(an evaluation's solution, stopped while its reference compiles), whichever stop came first; without a freezer's
hold it continues what it stopped, as before (sandbox/stop_holds.py)."""

from __future__ import annotations

import time

from cuda_agent.sandbox import Bystanders, Freezer

from .test_isolation import SPINNER, _cpu_ticks, _state_of, root_only, sandboxed


def _ran_ticks(pid: int, seconds: float = 0.3) -> int:
    t0 = _cpu_ticks(pid)
    time.sleep(seconds)
    return _cpu_ticks(pid) - t0


@root_only
def test_a_bystander_stops_end_leaves_what_a_freezer_holds_stopped_until_the_freezers_own_end():
    with sandboxed(SPINNER) as spinner:
        uid = spinner.slot.user.uid
        with Freezer([uid], gpu_files=()) as freezer:
            with freezer.frozen():   # B: its solution stopped while its reference compiles
                assert _state_of(spinner.pid) == "T"
                with Bystanders(spare=[]) as others:   # A: times meanwhile, its run ends inside B's block
                    others.stop({spinner.pid: uid})
                assert _state_of(spinner.pid) == "T" and _ran_ticks(spinner.pid) == 0
            assert _ran_ticks(spinner.pid) > 0   # B's own end continues it


@root_only
def test_a_bystander_stop_taken_before_the_freezers_does_not_wake_it_inside_the_freezers_block():
    with sandboxed(SPINNER) as spinner:
        uid = spinner.slot.user.uid
        others = Bystanders(spare=[])
        try:
            others.stop({spinner.pid: uid})   # A stops it first (B's child between its stages)
            with Freezer([uid], gpu_files=()) as freezer, freezer.frozen() as block:   # then B's compile begins
                others.close()                # A's run ends during B's compile
                assert _state_of(spinner.pid) == "T" and _ran_ticks(spinner.pid) == 0
            assert block.ran_ms == 0
        finally:
            others.close()
        assert _ran_ticks(spinner.pid) > 0


@root_only
def test_without_a_freezers_hold_a_bystander_stop_continues_what_it_stopped():
    with sandboxed(SPINNER) as spinner:
        uid = spinner.slot.user.uid
        with Bystanders(spare=[]) as others:
            assert others.stop({spinner.pid: uid}) == 0
            assert _ran_ticks(spinner.pid, 0.2) == 0
        assert _ran_ticks(spinner.pid) > 0


@root_only
def test_a_solution_that_runs_while_its_baselines_compile_fails_and_one_kept_stopped_does_not():
    """profiling._solution_stopped reads its block: a process of the solution continued during the compile (here
    by a SIGCONT from outside, as a timer of its own would send) fails the evaluation as the solution's doing."""
    import os
    import signal
    from types import SimpleNamespace

    import pytest

    from cuda_agent.harness.profiling import _solution_stopped
    from cuda_agent.harness.result import EvalResult
    from cuda_agent.harness.session import Stop

    with sandboxed(SPINNER) as spinner:
        session = SimpleNamespace(child=SimpleNamespace(proc=SimpleNamespace(pid=spinner.pid)))
        result = EvalResult(task="t", reward=1.0, correct=True, stage="profile", reason="correct")
        with _solution_stopped(session, result):
            assert _ran_ticks(spinner.pid, 0.1) == 0
        with pytest.raises(Stop, match="while its baselines were compiled") as caught:
            with _solution_stopped(session, result):
                os.kill(spinner.pid, signal.SIGCONT)
                time.sleep(0.1)
        assert caught.value.fault is None   # the solution's doing, not the harness's
