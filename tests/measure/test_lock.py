"""The device lock (measure/lock.py), with real processes: a timer waits for the compiles and builds
holding it shared and they wait while it times; a waiting timer is not starved; nested holds in one
thread do not deadlock behind a waiting timer; a holder killed mid-way releases it."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from cuda_agent.measure.lock import LockOrderError, alone_within, device_lock

CTX = mp.get_context("fork")  # the children start at once, with this process's imports
KEY = "cpu0"


def _hold(lock_dir, shared: bool, held, release, stamps, name: str) -> None:
    with device_lock(KEY, shared=shared, lock_dir=lock_dir):
        stamps.put((name, "got", time.monotonic()))
        held.set()
        release.wait(20)
        stamps.put((name, "released", time.monotonic()))


class Holder:
    """A process of its own that takes the lock (shared or alone) and holds it until released."""

    def __init__(self, lock_dir, shared: bool, name: str, stamps):
        self.held, self.release = CTX.Event(), CTX.Event()
        self.proc = CTX.Process(target=_hold, args=(lock_dir, shared, self.held, self.release, stamps, name))
        self.proc.start()

    def end(self) -> None:
        self.release.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(10)


@pytest.fixture
def stamps():
    return CTX.Queue()


def _events(stamps) -> dict[tuple[str, str], float]:
    out = {}
    while not stamps.empty():
        name, what, t = stamps.get(timeout=1)
        out[(name, what)] = t
    return out


def _waits(holder: Holder, seconds: float = 0.4) -> bool:
    """True when `holder` has not got the lock within `seconds`."""
    return not holder.held.wait(seconds)


def test_a_timer_waits_for_a_compile_holding_the_lock_shared(tmp_path, stamps):
    compile_ = Holder(tmp_path, True, "compile", stamps)
    assert compile_.held.wait(10)
    timer = Holder(tmp_path, False, "timer", stamps)
    try:
        assert _waits(timer), "the timer got the device while a compile held it shared"
        compile_.end()
        assert timer.held.wait(10)
    finally:
        timer.end()
        compile_.end()
    e = _events(stamps)
    assert e[("compile", "released")] <= e[("timer", "got")]


def test_a_compile_started_while_timing_waits_until_timing_ends(tmp_path, stamps):
    timer = Holder(tmp_path, False, "timer", stamps)
    assert timer.held.wait(10)
    build = Holder(tmp_path, True, "build", stamps)
    try:
        assert _waits(build), "a build started while the device was being timed"
        timer.end()
        assert build.held.wait(10)
    finally:
        build.end()
        timer.end()
    e = _events(stamps)
    assert e[("timer", "released")] <= e[("build", "got")]


def test_compiles_and_builds_share_the_lock_with_each_other(tmp_path, stamps):
    a = Holder(tmp_path, True, "compile", stamps)
    b = Holder(tmp_path, True, "build", stamps)
    try:
        assert a.held.wait(10) and b.held.wait(10)
    finally:
        a.end()
        b.end()


def _nested(lock_dir, outer_held, go_inner, inner_done) -> None:
    with device_lock(KEY, shared=True, lock_dir=lock_dir):  # an evaluation's shared block
        outer_held.set()
        go_inner.wait(20)
        with device_lock(KEY, shared=True, lock_dir=lock_dir):  # ... that builds, holding it shared again
            inner_done.set()


def test_a_nested_shared_hold_does_not_deadlock_behind_a_waiting_timer(tmp_path, stamps):
    """A second flock of the process would queue behind the timer at the turnstile, and the timer
    waits for the first: the nested hold must pass at once."""
    outer_held, go_inner, inner_done = CTX.Event(), CTX.Event(), CTX.Event()
    nested = CTX.Process(target=_nested, args=(tmp_path, outer_held, go_inner, inner_done))
    nested.start()
    timer = None
    try:
        assert outer_held.wait(10)
        timer = Holder(tmp_path, False, "timer", stamps)
        assert _waits(timer)  # the timer now waits at the turnstile
        go_inner.set()
        assert inner_done.wait(5), "deadlock: the nested shared hold waited behind the timer"
        nested.join(10)
        assert timer.held.wait(10)
    finally:
        if timer is not None:
            timer.end()
        if nested.is_alive():
            nested.kill()


def test_nesting_in_one_thread_keeps_the_outer_hold(tmp_path, stamps):
    with device_lock(KEY, lock_dir=tmp_path):  # timing alone ...
        with device_lock(KEY, shared=True, lock_dir=tmp_path):  # ... and a nested shared block inside
            pass
        other = Holder(tmp_path, True, "other", stamps)
        try:
            assert _waits(other), "the nested block released the outer hold"
        finally:
            other.release.set()
    assert other.held.wait(10)
    other.end()


def test_asking_for_the_lock_alone_while_holding_it_shared_raises(tmp_path, stamps):
    with device_lock(KEY, shared=True, lock_dir=tmp_path):
        with pytest.raises(LockOrderError, match="end the shared block"):
            with device_lock(KEY, lock_dir=tmp_path):
                pass
        timer = Holder(tmp_path, False, "timer", stamps)
        assert _waits(timer)  # still held shared
    assert timer.held.wait(10)
    timer.end()


def test_threads_are_holders_of_their_own(tmp_path):
    """A thread asking for the lock alone while another thread of the process holds it shared
    waits for it (no LockOrderError: the rule is per thread)."""
    got = threading.Event()
    release = threading.Event()

    def timer():
        with device_lock(KEY, lock_dir=tmp_path):
            got.set()

    with device_lock(KEY, shared=True, lock_dir=tmp_path):
        t = threading.Thread(target=timer)
        t.start()
        assert not got.wait(0.3)
        release.set()
    t.join(10)
    assert got.is_set()


def _fork_asks_alone(lock_dir, got) -> None:
    with device_lock(KEY, lock_dir=lock_dir):  # not the parent's hold: waits for it, never raises
        got.set()


def test_a_process_forked_by_a_holder_is_a_holder_of_its_own(tmp_path):
    got = CTX.Event()
    with device_lock(KEY, shared=True, lock_dir=tmp_path):
        child = CTX.Process(target=_fork_asks_alone, args=(tmp_path, got))
        child.start()
        assert not got.wait(0.4)
    child.join(10)
    assert got.is_set() and child.exitcode == 0


@pytest.mark.parametrize("shared", [False, True])
def test_a_holder_killed_mid_way_releases_the_lock(tmp_path, stamps, shared):
    holder = Holder(tmp_path, shared, "holder", stamps)
    assert holder.held.wait(10)
    timer = Holder(tmp_path, False, "timer", stamps)
    try:
        assert _waits(timer)
        holder.kill()
        assert timer.held.wait(10), "the lock stayed taken after its holder was killed"
    finally:
        timer.end()


def test_a_timer_killed_while_waiting_does_not_block_newcomers(tmp_path, stamps):
    """The waiting timer holds the turnstile: killed there, it must not keep shared users out."""
    first = Holder(tmp_path, True, "first", stamps)
    assert first.held.wait(10)
    timer = Holder(tmp_path, False, "timer", stamps)
    later = None
    try:
        assert _waits(timer)
        timer.kill()
        later = Holder(tmp_path, True, "later", stamps)
        assert later.held.wait(10)
    finally:
        first.end()
        if later is not None:
            later.end()


def test_a_waiting_timer_goes_before_later_shared_users(tmp_path):
    """Evaluations hold the device lock shared; a timer waiting for it alone is not starved by
    evaluations that arrive after it."""
    order = []
    first_shared = threading.Event()

    def shared_user(name, hold):
        with device_lock("cuda0", shared=True, lock_dir=tmp_path):
            first_shared.set()
            order.append(name)
            time.sleep(hold)

    def timer():
        with device_lock("cuda0", lock_dir=tmp_path):
            order.append("timer")

    a = threading.Thread(target=shared_user, args=("a", 0.5))
    a.start()
    first_shared.wait()
    t = threading.Thread(target=timer)
    t.start()
    time.sleep(0.1)  # the timer is now waiting for `a`
    b = threading.Thread(target=shared_user, args=("b", 0))
    b.start()
    for th in (a, t, b):
        th.join(5)
    assert order == ["a", "timer", "b"]


def _compile_that_benchmarks(lock_dir, shared_held, go, alone_got, alone_end, back, stamps, name) -> None:
    """A compile (the lock shared) whose first call benchmarks kernels on the device (alone_within)."""
    with device_lock(KEY, shared=True, lock_dir=lock_dir):
        shared_held.set()
        go.wait(20)
        with alone_within(KEY, lock_dir=lock_dir):
            stamps.put((name, "alone", time.monotonic()))
            alone_got.set()
            alone_end.wait(20)
            stamps.put((name, "alone ends", time.monotonic()))
        back.set()  # shared again
        go.wait(20)


class Compiler:
    def __init__(self, lock_dir, name: str, stamps):
        self.shared_held, self.go, self.alone_got = CTX.Event(), CTX.Event(), CTX.Event()
        self.alone_end, self.back = CTX.Event(), CTX.Event()
        self.proc = CTX.Process(target=_compile_that_benchmarks,
                                args=(lock_dir, self.shared_held, self.go, self.alone_got, self.alone_end, self.back,
                                      stamps, name))
        self.proc.start()

    def end(self) -> None:
        for e in (self.go, self.alone_end):
            e.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def test_a_benchmark_inside_a_compile_waits_for_other_compiles_and_keeps_them_out(tmp_path, stamps):
    """Inductor's autotuning inside a shared hold: it has the device to itself (others' compiles
    end first, new shared users wait), then holds it shared again, as the compile goes on."""
    other = Holder(tmp_path, True, "other", stamps)
    compiler = Compiler(tmp_path, "compiler", stamps)
    late = None
    try:
        assert other.held.wait(10) and compiler.shared_held.wait(10)
        compiler.go.set()
        assert not compiler.alone_got.wait(0.4), "benchmarked beside another process's shared hold"
        other.end()
        assert compiler.alone_got.wait(10)
        late = Holder(tmp_path, True, "late", stamps)
        assert _waits(late), "a shared user got the device while the benchmark held it alone"
        compiler.alone_end.set()
        assert compiler.back.wait(10) and late.held.wait(10)  # shared again: beside `late`
        timer = Holder(tmp_path, False, "timer", stamps)
        assert _waits(timer), "the compile's shared hold was not taken back after the benchmark"
        compiler.end()
        late.end()
        assert timer.held.wait(10)
        timer.end()
    finally:
        other.end()
        compiler.end()
        if late is not None:
            late.end()
    e = _events(stamps)
    assert e[("other", "released")] <= e[("compiler", "alone")]
    assert e[("compiler", "alone ends")] <= e[("late", "got")]


def test_two_compiles_benchmarking_at_once_take_turns_without_deadlock(tmp_path, stamps):
    """Each lets its shared hold go before it asks for the device alone: were it kept, each would
    wait for the other's forever."""
    a, b = Compiler(tmp_path, "a", stamps), Compiler(tmp_path, "b", stamps)
    try:
        assert a.shared_held.wait(10) and b.shared_held.wait(10)
        a.go.set()
        b.go.set()
        first, second = (a, b) if a.alone_got.wait(10) else (b, a)
        assert first.alone_got.is_set(), "neither compile got the device alone: deadlock"
        assert not second.alone_got.wait(0.3)
        first.alone_end.set()
        assert second.alone_got.wait(10), "the second benchmark never got the device"
        second.alone_end.set()
        assert first.back.wait(10) and second.back.wait(10)
    finally:
        a.end()
        b.end()


def test_alone_within_without_a_hold_is_the_lock_alone_and_nests_in_one(tmp_path, stamps):
    with alone_within(KEY, lock_dir=tmp_path):
        other = Holder(tmp_path, True, "other", stamps)
        assert _waits(other)
    assert other.held.wait(10)
    other.end()
    with device_lock(KEY, lock_dir=tmp_path):  # held alone already: passes at once
        with alone_within(KEY, lock_dir=tmp_path):
            pass


def _turn(lock_dir, key: str, held, release, stamps, name: str) -> None:
    from cuda_agent.measure.lock import compile_turn

    with compile_turn(key, lock_dir):
        stamps.put((name, "got", time.monotonic()))
        held.set()
        release.wait(20)


def _turn_holder(lock_dir, key: str, name: str, stamps):
    held, release = CTX.Event(), CTX.Event()
    proc = CTX.Process(target=_turn, args=(lock_dir, key, held, release, stamps, name))
    proc.start()
    return held, release, proc


def test_compile_turn_one_task_at_a_time_host_wide(tmp_path, stamps):
    """Two processes compiling one task take turns; a process waiting for its turn holds no device
    lock (a timer takes it meanwhile); another task's compile does not wait."""
    from cuda_agent.measure.lock import COMPILE_TURNS, compile_turn
    import hashlib

    def turn_of(key):
        return int(hashlib.sha256(key.encode()).hexdigest(), 16) % COMPILE_TURNS

    other = next(f"task-b-{i}:cpu" for i in range(1000) if turn_of(f"task-b-{i}:cpu") != turn_of("task-a:cpu"))
    held_a, release_a, first = _turn_holder(tmp_path, "task-a:cpu", "first", stamps)
    assert held_a.wait(10)
    held_b, release_b, second = _turn_holder(tmp_path, "task-a:cpu", "second", stamps)
    assert not held_b.wait(0.5), "a second compile of the task started while the first held its turn"
    with device_lock(KEY, shared=False, lock_dir=tmp_path):  # the waiter holds no device lock
        pass
    t0 = time.monotonic()
    with compile_turn(other, tmp_path):  # another task's turn is free
        assert time.monotonic() - t0 < 1
    release_a.set()
    first.join(10)
    assert held_b.wait(10), "the second compile never got its turn after the first ended"
    release_b.set()
    second.join(10)
    got = _events(stamps)
    assert got[("second", "got")] > got[("first", "got")]


def test_compile_turn_released_when_its_holder_dies(tmp_path, stamps):
    """A worker killed while compiling (a timeout, a crash) does not leave its task's turn taken."""
    from cuda_agent.measure.lock import compile_turn

    held, _release, proc = _turn_holder(tmp_path, "task-a:cpu", "doomed", stamps)
    assert held.wait(10)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    t0 = time.monotonic()
    with compile_turn("task-a:cpu", tmp_path):
        assert time.monotonic() - t0 < 2


def test_compile_turn_is_refused_inside_a_device_hold_and_given_up_after_its_wait(tmp_path, stamps):
    """Waiting for a turn while holding the device lock could stall the turn's holder (its autotuning takes
    the device alone): refused. A turn not had in time is gone without (the compile runs anyway)."""
    from cuda_agent.measure.lock import compile_turn

    with device_lock(KEY, shared=True, lock_dir=tmp_path):
        with pytest.raises(LockOrderError):
            with compile_turn("task-a:cpu", tmp_path):
                pass
    held, release, proc = _turn_holder(tmp_path, "task-a:cpu", "holder", stamps)
    try:
        assert held.wait(10)
        t0 = time.monotonic()
        with compile_turn("task-a:cpu", tmp_path, max_wait_s=0.3) as had:
            assert had is False and 0.25 < time.monotonic() - t0 < 3
    finally:
        release.set()
        proc.join(10)
    with compile_turn("task-a:cpu", tmp_path, max_wait_s=0.3) as had:
        assert had is True


def test_the_locks_are_the_machines_whatever_the_home(tmp_path, monkeypatch):
    """Two homes on one machine time on the same GPUs, so they share one folder of locks: a timer of one
    waits for the other's. `$CUDA_AGENT_LOCKS` names another; a folder another user owns or could write is
    not used; one of ours only we could write is closed to others."""
    from cuda_agent import home
    from measure.lockprobe import would_wait

    key = "test-homes0"   # a lock of its own: not a device another run on this machine times on
    monkeypatch.delenv(home.LOCKS_ENV, raising=False)
    monkeypatch.setenv("CUDA_AGENT_HOME", str(tmp_path / "a"))
    first = home.locks()
    monkeypatch.setenv("CUDA_AGENT_HOME", str(tmp_path / "b"))
    assert home.locks() == first and not str(first).startswith(str(tmp_path))
    assert os.stat(first).st_mode & 0o777 == 0o700 and os.stat(first).st_uid == os.geteuid()
    with device_lock(key, shared=True):   # held through home b's folder ...
        monkeypatch.setenv("CUDA_AGENT_HOME", str(tmp_path / "a"))
        assert would_wait(home.locks() / f"{key}.lock")   # ... and a timer of home a would wait for it
    assert not would_wait(first / f"{key}.lock")

    monkeypatch.setenv(home.LOCKS_ENV, str(tmp_path / "named"))
    assert home.locks() == tmp_path / "named"
    monkeypatch.delenv(home.LOCKS_ENV)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(home.tempfile, "gettempdir", lambda: str(tmp))
    uid = os.geteuid()
    monkeypatch.setattr(home.os, "geteuid", lambda: uid + 4242)   # a user whose folder someone else made
    other = tmp / f"cuda-agent-locks-{uid + 4242}"
    other.mkdir(mode=0o700)
    assert home.locks() == tmp_path / "a" / "locks"   # the home's own, not another's
    monkeypatch.setattr(home.os, "geteuid", lambda: uid + 4343)   # ours, but others could write it
    open_one = tmp / f"cuda-agent-locks-{uid + 4343}"
    open_one.mkdir()
    os.chmod(open_one, 0o777)
    monkeypatch.setattr(home.os, "lstat", lambda p: _as_owner(os.stat(p), uid + 4343))
    assert home.locks() == tmp_path / "a" / "locks"
    os.chmod(open_one, 0o755)   # ours, and only we could write it: closed to others and used
    assert home.locks() == open_one and os.stat(open_one).st_mode & 0o777 == 0o700


def _as_owner(st: os.stat_result, uid: int) -> os.stat_result:
    fields = list(st)
    fields[4] = uid
    return os.stat_result(fields)


def test_let_go_frees_the_device_for_a_block_and_takes_the_shared_hold_back(tmp_path):
    """A compile's CPU stretch lets go of its shared hold: a timer could take the lock then; after the
    block the hold is back (shared: other runs may share it, a timer may not)."""
    from cuda_agent.measure.lock import let_go

    from .lockprobe import would_wait

    lock = tmp_path / f"{KEY}.lock"
    with device_lock(KEY, shared=True, lock_dir=tmp_path):
        assert would_wait(lock)
        with let_go(KEY, lock_dir=tmp_path) as went:
            assert went and not would_wait(lock)
            with device_lock(KEY, shared=False, lock_dir=tmp_path):  # device work inside takes it itself
                assert would_wait(lock, shared=True)
        assert would_wait(lock) and not would_wait(lock, shared=True)
        with device_lock(KEY, shared=True, lock_dir=tmp_path):  # nested use of the hold taken back
            pass
    assert not would_wait(lock)
    with let_go(KEY, lock_dir=tmp_path) as went:  # no hold: nothing to let go
        assert not went
    with device_lock(KEY, shared=False, lock_dir=tmp_path), let_go(KEY, lock_dir=tmp_path) as went:
        assert not went and would_wait(lock, shared=True)  # a timer's hold is never let go


def test_let_go_refuses_to_take_the_hold_back_while_the_block_still_holds_the_lock(tmp_path):
    """Taking the hold back while the block's own hold (another open file) is kept would wait for itself."""
    from contextlib import ExitStack

    from cuda_agent.measure.lock import let_go

    with device_lock(KEY, shared=True, lock_dir=tmp_path), ExitStack() as kept:
        with pytest.raises(LockOrderError, match="still held"):
            with let_go(KEY, lock_dir=tmp_path):
                kept.enter_context(device_lock(KEY, shared=False, lock_dir=tmp_path))


def test_the_seconds_held_alone_are_counted_and_shared_holds_are_not(tmp_path):
    """held_alone_s: what a process kept every other user of the device waiting for (synth's workers report it by
    request): an alone hold, an alone block inside a shared hold, and not a shared hold or an inner nested hold."""
    from cuda_agent.measure.lock import held_alone_s

    start = held_alone_s()
    with device_lock(KEY, shared=True, lock_dir=tmp_path):
        time.sleep(0.05)
    assert held_alone_s() == start
    # bounds by the blocks' own wall time, never a fixed one: a loaded machine stretches a sleep
    t = time.perf_counter()
    with device_lock(KEY, lock_dir=tmp_path):
        with device_lock(KEY, lock_dir=tmp_path):   # nested: counted once, by the outer hold
            time.sleep(0.05)
    wall = time.perf_counter() - t
    alone = held_alone_s() - start
    assert 0.05 <= alone <= wall
    with device_lock(KEY, shared=True, lock_dir=tmp_path):
        t = time.perf_counter()
        with alone_within(KEY, lock_dir=tmp_path):
            time.sleep(0.05)
        wall = time.perf_counter() - t
        time.sleep(0.05)  # shared again
    assert 0.05 <= held_alone_s() - start - alone <= wall
