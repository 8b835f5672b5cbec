"""A reference worker kept for its task's next evaluation (spares.finish): the second evaluation of a
task compiles nothing (torch's cache holds the task's classes), verdicts stay what a fresh worker
gives, a failed solution does not cost the worker, another task gets a worker of its own, and a
worker that died, or one asked to serve while it waits for its first job, is closed, never kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cuda_agent.devices import Backend
from cuda_agent.harness import EvalConfig, TimingPlan, evaluate, keep_warm
from cuda_agent.harness.config import EvalConfig as Config
from cuda_agent.harness.workers import spares
from cuda_agent.sandbox.isolation import ensure_user
from cuda_agent.tasks import load_task

HACKS = Path(__file__).resolve().parents[2] / "hacks"
PLAN = TimingPlan(min_runs=5, max_runs=30, budget_s=0.2, warmup_s=0.0, min_warmup=2, min_rounds=4)


def _case(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(HACKS / "cpu" / name, dest, ignore=shutil.ignore_patterns("expect.json"))
    return dest


@pytest.mark.slow
def test_the_next_evaluation_of_a_task_reuses_its_reference_worker_and_compiles_nothing(tmp_path):
    sbr, linear = (load_task(HACKS / "tasks" / f"{t}.py") for t in ("sbr_small", "linear_small"))
    timed = EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False)
    honest = _case(tmp_path, "honest_fused")
    with keep_warm():
        first = evaluate(sbr, honest, timed)
        second = evaluate(sbr, honest, timed)
        wrong = evaluate(sbr, _case(tmp_path, "constant_zeros"), timed)
        other = evaluate(linear, _case(tmp_path, "honest_linear_params"), EvalConfig(device="cpu", profile=False))
        third = evaluate(sbr, honest, timed)
        kept = list(spares._kept.values())
        assert len(kept) == 2 and all(r.alive() for r in kept)
    assert not spares._kept and not any(r.alive() for r in kept)  # the block's end closed them

    for r in (first, second, third):
        assert r.correct and r.reward >= 1 and r.paired is not None, r.reason
    assert [r.details["reference_jobs"] for r in (first, second, wrong, other, third)] == [1, 2, 3, 1, 4]
    assert first.details["compile_graphs"] >= 1
    assert second.details["compile_graphs"] == 0 and third.details["compile_graphs"] == 0
    # the worker's laps: the task's turn, the lock, the compile itself (the first also its process's warm-up)
    laps = first.details["steps_s"]
    assert {"reference.compile_turn", "reference.compile_lock", "reference.compile"} <= set(laps), laps
    assert all(v >= 0 for v in laps.values()), laps
    assert laps["reference.compile"] <= first.stage_seconds["compile"] + 0.01, (laps, first.stage_seconds)
    assert "reference.compile_warm" not in second.details["steps_s"]   # a kept worker paid it once
    assert wrong.reward == -1 and wrong.stage == "correctness" and "differs from the reference" in wrong.reason
    assert other.correct, other.reason


def test_a_dead_reference_worker_is_closed_not_kept():
    backend, config = Backend("cpu"), Config(device="cpu", profile=False)
    with keep_warm(0):
        pair = spares.take_pair(ensure_user(), backend, config, "task")
        pair.ref.kill()
        assert not spares.finish(pair, "task", reusable=True)
        assert not spares._kept


def test_a_reference_worker_is_kept_only_after_an_evaluation_it_served():
    """Asked to go on before it was given a job, or after an evaluation that failed on its side
    (reusable False), or for no task, the worker is closed."""
    backend, config = Backend("cpu"), Config(device="cpu", profile=False)
    with keep_warm(0):
        for task, reusable in (("task", True), ("task", False), ("", True)):
            pair = spares.take_pair(ensure_user(), backend, config, task)
            assert not spares.finish(pair, task, reusable)
            assert not pair.reference.alive() and not pair.reference.home.exists()
        assert not spares._kept


def test_no_more_than_kept_references_are_kept(monkeypatch):
    """The least recently kept worker goes first."""
    backend, config = Backend("cpu"), Config(device="cpu", profile=False)
    monkeypatch.setattr(spares, "_will_serve", lambda ref: True)
    with keep_warm(0):
        pairs = [spares.take_pair(ensure_user(), backend, config, f"task{i}") for i in range(spares.KEPT_REFERENCES + 1)]
        for i, pair in enumerate(pairs):
            assert spares.finish(pair, f"task{i}", reusable=True)
        assert [t for _, t in spares._kept] == [f"task{i}" for i in range(1, spares.KEPT_REFERENCES + 1)]
        assert not pairs[0].reference.alive()
        again = spares.take_pair(ensure_user(), backend, config, "task1")
        assert again.reference is pairs[1].reference and again.reference.jobs == 2
        again.close()


def test_outside_keep_warm_no_reference_worker_is_kept(monkeypatch):
    """A one-off evaluation (the CLI's) leaves no idle worker holding memory behind."""
    monkeypatch.setattr(spares, "_will_serve", lambda ref: True)
    pair = spares.take_pair(ensure_user(), Backend("cpu"), Config(device="cpu", profile=False), "task")
    assert not spares.finish(pair, "task", reusable=True)
    assert not spares._kept and not pair.reference.alive()


def test_a_child_without_a_sandbox_user_of_its_own_leaves_no_reference_worker_kept(monkeypatch):
    """Where the child shares the harness's user it could reach into the worker (ptrace) and stay there."""
    monkeypatch.setattr(spares, "_will_serve", lambda ref: True)
    with keep_warm(0):
        pair = spares.take_pair(None, Backend("cpu"), Config(device="cpu", profile=False), "task")
        assert pair.slot is None
        assert not spares.finish(pair, "task", reusable=True)
        assert not spares._kept


def test_an_inner_keep_warm_block_ending_leaves_the_outer_blocks_workers_kept(monkeypatch):
    monkeypatch.setattr(spares, "_will_serve", lambda ref: True)
    backend, config = Backend("cpu"), Config(device="cpu", profile=False)
    with keep_warm(0):
        pair = spares.take_pair(ensure_user(), backend, config, "task")
        assert spares.finish(pair, "task", reusable=True)
        with keep_warm(0):
            pass
        assert list(spares._kept.values()) == [pair.reference] and pair.reference.alive()
    assert not spares._kept and not pair.reference.alive()


def test_a_reference_handed_to_a_pair_whose_child_cannot_start_is_closed(monkeypatch):
    backend, config = Backend("cpu"), Config(device="cpu", profile=False)
    ref = spares.start_reference(backend, config)

    def refuse(*a, **k):
        raise OSError("no child today")

    monkeypatch.setattr(spares, "Process", refuse)
    with pytest.raises(OSError):
        spares.start_pair(ensure_user(), backend, config, reference=ref)
    assert not ref.alive() and not ref.home.exists()


def _hold_turn(key: str, lock_dir: str, held, release) -> None:
    from cuda_agent.measure import compile_turn

    with compile_turn(key, Path(lock_dir)):
        held.set()
        release.wait(120)


@pytest.mark.slow
def test_a_reference_workers_first_compile_waits_for_its_tasks_turn_and_a_kept_ones_does_not(tmp_path):
    """The turn the reference worker takes is the task's (task_digest of its source, the device): while
    another process holds it, a new worker's evaluation cannot end (its compile waits, up to 180 s); a
    kept worker compiles from its own cache and ends while the turn is still held. Orderings, no speeds."""
    import multiprocessing as mp
    import threading

    from cuda_agent.home import subdir

    sbr = load_task(HACKS / "tasks" / "sbr_small.py")
    timed = EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False)
    honest = _case(tmp_path, "honest_fused")
    ctx = mp.get_context("fork")
    key = f"{spares.task_digest(sbr.code)}:cpu"
    got: dict = {}

    def holding(name: str, release_after: float | None):
        """`name`'s evaluation while another process holds the task's turn; whether it ended while held."""
        held, release = ctx.Event(), ctx.Event()
        holder = ctx.Process(target=_hold_turn, args=(key, str(subdir("locks")), held, release))  # the home's turns
        holder.start()
        try:
            assert held.wait(20)
            run = threading.Thread(target=lambda: got.__setitem__(name, evaluate(sbr, honest, timed)))
            run.start()
            run.join(release_after if release_after is not None else 120)
            ended_while_held = not run.is_alive()
            release.set()
            run.join(120)
        finally:
            release.set()
            holder.join(10)
        return ended_while_held

    with keep_warm():
        first_ended = holding("first", 12.0)     # a new reference worker: waits for the turn
        second_ended = holding("second", None)   # the kept one: takes no turn
    first, second = got["first"], got["second"]
    assert first.correct and second.correct, (first.reason, second.reason)
    assert not first_ended, "the first evaluation ended while its task's compile turn was held elsewhere"
    assert second.details["reference_jobs"] == 2 and second_ended, "the kept worker waited for the turn"


class _FakeProcess:
    def __init__(self):
        self.proc = self
        self.pid = 2**22 + 17  # no such process: pinning it is refused and ignored
        self.closed = False

    def poll(self):
        return 0 if self.closed else None

    def close(self):
        self.closed = True


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["cpu", "gpu-path"])
def test_a_spare_displaced_by_a_kept_reference_gives_its_reference_worker_to_the_next_spare(monkeypatch, tmp_path, device):
    """With a worker kept for the task, the spare taken keeps its child and its reference worker goes to the
    spare started next: no reference worker starts (import, CUDA context, the warm-up compile that holds the
    device lock shared) for an evaluation that reuses a kept one. On a GPU none is left idle afterwards."""
    started: list[spares.Reference] = []

    def fake_start_pair(user, backend, config, spare=False, reference=None):
        if reference is None:
            reference = spares.Reference(_FakeProcess(), tmp_path)
            started.append(reference)
        return spares.Pair(exchange=None, reference=reference, child=_FakeProcess(),
                           key=spares._key(user, backend, config), slot=object())  # a sandbox user of its own

    monkeypatch.setattr(spares, "start_pair", fake_start_pair)
    monkeypatch.setattr(spares.Pair, "close_child", lambda self: self.child.close())
    monkeypatch.setattr(spares, "_will_serve", lambda ref: True)
    monkeypatch.setattr(spares.Reference, "close", lambda self: self.process.close())
    backend, config, user = Backend(device), Config(device=device), object()
    with keep_warm(depth=1, foreground={0}, background={0}):
        first = spares.take_pair(user, backend, config, "task")
        assert len(started) == 2  # the first pair and one spare
        assert spares.finish(first, "task", reusable=True)
        for _ in range(3):
            spare_ref = spares._spares[0].reference
            pair = spares.take_pair(user, backend, config, "task")
            assert pair.reference is first.reference and pair.reference.jobs > 1
            assert len(started) == 2, "no reference worker started while one was kept for the task"
            assert spares._spares[0].reference is spare_ref and not spare_ref.process.closed
            assert not spares._idle
            assert spares.finish(pair, "task", reusable=True)


def _fake_pairs(monkeypatch, tmp_path, started: list, refuse_spares: bool = False):
    def fake_start_pair(user, backend, config, spare=False, reference=None):
        if spare and refuse_spares:
            if reference is not None:  # as start_pair does: nothing half-made is left
                reference.close()
            raise OSError("Resource temporarily unavailable")
        if reference is None:
            reference = spares.Reference(_FakeProcess(), tmp_path)
            started.append(reference)
        return spares.Pair(exchange=None, reference=reference, child=_FakeProcess(),
                           key=spares._key(user, backend, config), slot=object())

    monkeypatch.setattr(spares, "start_pair", fake_start_pair)
    monkeypatch.setattr(spares.Pair, "close_child", lambda self: self.child.close())
    monkeypatch.setattr(spares, "_will_serve", lambda ref: True)
    monkeypatch.setattr(spares.Reference, "close", lambda self: self.process.close())


def test_on_a_gpu_a_displaced_reference_worker_no_spare_takes_is_closed(monkeypatch, tmp_path):
    """Without cores set aside an evaluation that times starts no spare: the displaced worker is not kept idle."""
    started: list[spares.Reference] = []
    _fake_pairs(monkeypatch, tmp_path, started)
    backend, user = Backend("cuda"), object()
    with keep_warm(depth=1):
        first = spares.take_pair(user, backend, Config(device="cuda", profile=False), "task")  # tops up: untimed
        assert spares.finish(first, "task", reusable=True) and len(spares._spares) == 1
        spare_ref = spares._spares[0].reference
        pair = spares.take_pair(user, backend, Config(device="cuda", profile=True), "task")
        assert pair.reference is first.reference and not spares._spares and not spares._idle
        assert spare_ref.process.closed


def test_a_spare_that_cannot_start_costs_the_evaluation_nothing_and_leaks_nothing(monkeypatch, tmp_path):
    started: list[spares.Reference] = []
    _fake_pairs(monkeypatch, tmp_path, started)
    backend, config, user = Backend("cuda"), Config(device="cuda"), object()
    with keep_warm(depth=1, foreground={0}, background={0}):
        first = spares.take_pair(user, backend, config, "task")
        assert spares.finish(first, "task", reusable=True)
        spare_ref = spares._spares[0].reference
        _fake_pairs(monkeypatch, tmp_path, started, refuse_spares=True)
        pair = spares.take_pair(user, backend, config, "task")
        assert pair.reference is first.reference and not pair.reference.process.closed
        assert "a spare could not start: OSError" in pair.note
        assert spare_ref.process.closed and not spares._idle and not spares._spares  # handed over, then closed
