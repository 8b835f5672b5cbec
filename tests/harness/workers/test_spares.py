"""Spare processes and sandbox users: the next evaluation's processes start ahead, and no two live
solution children share a uid (one could otherwise ptrace or plant files for the other)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuda_agent.devices import Backend
from cuda_agent.harness.config import EvalConfig
from cuda_agent.sandbox import Process
from cuda_agent.sandbox.isolation import ensure_user
from cuda_agent.harness.workers.spares import keep_warm, take_pair

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox users need root")


def _uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


def test_inside_keep_warm_the_next_pair_is_started_ahead_and_then_used():
    backend, config = Backend("cpu"), EvalConfig(device="cpu", profile=False)
    user = ensure_user()
    with keep_warm():
        first = take_pair(user, backend, config)
        from cuda_agent.harness.workers import spares
        spare = spares._spares[0]
        assert len(spares._spares) == 1 and spare.alive()
        second = take_pair(user, backend, config)
        assert second is spare
        first.close()
        second.close()
        leftover = spares._spares[0]
    assert not leftover.alive()  # the block's end closed the last spare
    assert not spares._spares


@root_only
def test_live_children_never_share_a_sandbox_user():
    backend, config = Backend("cpu"), EvalConfig(device="cpu", profile=False)
    with keep_warm():
        first = take_pair(ensure_user(), backend, config)
        second = take_pair(ensure_user(), backend, config)
        try:
            uids = {_uid(first.child.proc.pid), _uid(second.child.proc.pid)}
            from cuda_agent.harness.workers import spares
            uids.add(_uid(spares._spares[0].child.proc.pid))
            assert len(uids) == 3 and 0 not in uids
            assert os.stat(first.exchange.public).st_uid == _uid(first.child.proc.pid)
        finally:
            first.close()
            second.close()


def test_without_cores_set_aside_no_spare_starts_beside_an_evaluation_that_times():
    """A spare's start is seconds of importing torch: not beside timing on the same cores."""
    backend, user = Backend("cpu"), ensure_user()
    from cuda_agent.harness.workers import spares
    with keep_warm():
        timed = take_pair(user, backend, EvalConfig(device="cpu", profile=True))
        try:
            assert not spares._spares
            untimed = take_pair(user, backend, EvalConfig(device="cpu", profile=False))
            assert len(spares._spares) == 1   # topped up by the next evaluation that does not time
            untimed.close()
            again = take_pair(user, backend, EvalConfig(device="cpu", profile=True))
            assert not spares._spares          # a timed evaluation takes the spare ready for it
            again.close()
        finally:
            timed.close()


def test_a_deeper_block_keeps_that_many_spares_on_the_background_cores():
    backend, config = Backend("cpu"), EvalConfig(device="cpu")
    cores = sorted(os.sched_getaffinity(0))
    fg, bg = {cores[0]}, set(cores[1:]) or {cores[0]}
    with keep_warm(depth=2, foreground=fg, background=bg):
        pair = take_pair(ensure_user(), backend, config)
        from cuda_agent.harness.workers import spares
        try:
            assert len(spares._spares) == 2 and all(s.alive() for s in spares._spares)
            assert os.sched_getaffinity(pair.child.proc.pid) == fg
            assert all(os.sched_getaffinity(s.ref.proc.pid) == bg for s in spares._spares)
            assert os.sched_getaffinity(pair.ref.proc.pid) == bg  # only the child, which times, moves
        finally:
            pair.close()
    assert not spares._spares


def _environ(process: Process) -> dict[str, str]:
    """The environment a process was started with (a forked child's /proc/PID/environ is its server's)."""
    return process.env


def test_a_spares_reference_worker_warms_torch_compile_and_shares_the_homes_compile_cache():
    """Every evaluation compiles its baselines (they are timed paired with the solution): a spare's
    reference worker pays torch.compile's first-use costs while it waits, a pair started for an
    evaluation does not; every reference worker's Inductor cache is the home's, the child's its own."""
    from cuda_agent.harness.workers import spares
    from cuda_agent.home import subdir

    backend, config = Backend("cpu"), EvalConfig(device="cpu", profile=True)
    with keep_warm(1, background=set(os.sched_getaffinity(0))):   # spares for evaluations that time: cores aside
        now = take_pair(ensure_user(), backend, config)
        try:
            ahead = spares._spares[0]
            assert spares.WARM_COMPILE_ENV not in _environ(now.ref)
            assert _environ(ahead.ref)[spares.WARM_COMPILE_ENV] == "cpu0"
            assert _environ(ahead.ref)[spares.WARM_OFF_LOCK_ENV] == ""   # EvalConfig.compile_lets_go: not on the CPU
            for pair in (now, ahead):
                assert _environ(pair.ref)["TORCHINDUCTOR_CACHE_DIR"] == str(subdir("inductor"))
                assert _environ(pair.child)["TORCHINDUCTOR_CACHE_DIR"] != str(subdir("inductor"))
        finally:
            now.close()


def test_a_spare_for_evaluations_that_do_not_time_compiles_nothing_ahead():
    """An RL reward that only checks correctness never compiles the reference: its spares' reference
    workers would spend seconds of CPU on a compile nobody uses (a 64-core host with three RL runs,
    2026-11-27: a correctness-only evaluation took a median 34 s)."""
    from cuda_agent.harness.workers import spares

    with keep_warm():
        now = take_pair(ensure_user(), Backend("cpu"), EvalConfig(device="cpu", profile=False))
        try:
            assert spares.WARM_COMPILE_ENV not in _environ(spares._spares[0].ref)
        finally:
            now.close()
