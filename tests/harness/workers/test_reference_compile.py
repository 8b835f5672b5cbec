"""A reference worker's first compile of a task: torch.compile's first-use costs (imports, Inductor's
set-up: 10-12 s of a fresh H100 worker's compile) are paid before the task's turn on the host
(measure.compile_turn), so that the turn holds only the task's compile; a worker that has paid them
(a spare warmed while it waited, or one kept for its task) pays nothing again."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

import cuda_agent.measure as measure
from cuda_agent.harness.workers import reference
from cuda_agent.measure import module_from_source

HACKS = Path(__file__).resolve().parents[2] / "hacks"


class Channel:
    """The harness's side of a worker's channel: the requests it will send, the replies it got."""

    def __init__(self, requests: list[dict]):
        self.requests, self.replies = list(requests), []

    def recv(self):
        return self.requests.pop(0) if self.requests else None

    def send(self, message: dict) -> None:
        self.replies.append(message)


@pytest.fixture
def events(monkeypatch) -> list[tuple[str, str]]:
    """What the worker did, in order: ("compile", the module's class) and ("turn", the task's key)."""
    seen: list[tuple[str, str]] = []

    @contextmanager
    def turn(task_key, lock_dir=None, max_wait_s=None):
        seen.append(("turn", task_key))
        yield True

    def compile_for_timing(model, inputs, alone=None, lock_dir=None, off_lock=None):  # one graph, as torch's makes
        from torch._dynamo.utils import counters

        seen.append(("compile", type(model).__name__))
        counters["stats"]["unique_graphs"] += 1
        return model

    monkeypatch.setattr(measure, "compile_turn", turn)
    monkeypatch.setattr(measure, "compile_for_timing", compile_for_timing)
    monkeypatch.setattr(reference, "_warmed", False)  # a fresh worker
    monkeypatch.setattr(reference, "_warm_made", 0)
    import torch._dynamo  # noqa: F401  (its counter, which the fake compile moves)
    return seen


def _job(tmp_path: Path, turn: str) -> dict:
    return {"device": "cpu", "weights_seed": 7, "state_path": str(tmp_path / "state.pt"), "compile_turn": turn}


def test_a_fresh_worker_warms_torch_compile_before_its_tasks_turn_and_a_warmed_one_does_not(tmp_path, events):
    task = module_from_source((HACKS / "tasks" / "sbr_small.py").read_text(), "reference", "model.py")
    compile_request = {"op": "compile", "seed": 11, "quiet": False}
    first = Channel([compile_request, {"op": "next"}])
    made = reference._graphs()
    assert reference.serve_job(first, _job(tmp_path, "sbr:cpu"), task) == {"op": "next"}
    assert events == [("compile", "ReLU"), ("turn", "sbr:cpu"), ("compile", "Model")]
    reply = first.replies[-1]
    assert {k: v for k, v in reply.items() if k != "steps"} == {"ok": True, "graphs": 1}  # the warm-up's is no task's
    assert set(reply["steps"]) == {"compile_warm", "compile_turn", "compile_lock", "compile"}   # the stage's seconds
    assert reference._graphs() == made + 1

    events.clear()  # the same worker's next job (kept for its task: no turn), and a new task's first compile
    reference.serve_job(Channel([compile_request, {"op": "next"}]), _job(tmp_path, ""), task)
    reference.serve_job(Channel([compile_request, {"op": "next"}]), _job(tmp_path, "other:cpu"), task)
    assert events == [("compile", "Model"), ("turn", "other:cpu"), ("compile", "Model")]


def test_with_the_host_quiet_both_compiles_let_go_of_the_lock_they_hold_shared_unless_told_to_keep_it(
        tmp_path, monkeypatch):
    """EvalConfig.compile_off_lock reaches the worker as `off_lock`: the warm-up's and the task's compile are handed
    the key of the lock they hold shared (measure.compile_off_lock then lets go of it while TorchDynamo and Inductor
    work on the CPU); with `off_lock` false, or without a quiet host (no lock held), nothing is let go."""
    from measure.lockprobe import would_wait

    task = module_from_source((HACKS / "tasks" / "sbr_small.py").read_text(), "reference", "model.py")
    lock = tmp_path / "cpu0.lock"
    seen: list[tuple] = []

    def compile_for_timing(model, inputs, alone=None, lock_dir=None, off_lock=None):
        seen.append((type(model).__name__, alone, off_lock, would_wait(lock)))   # held shared while it compiles
        return model

    monkeypatch.setattr(measure, "compile_for_timing", compile_for_timing)
    for off, quiet, expect in ((True, True, "cpu0"), (False, True, None), (True, False, None)):
        monkeypatch.setattr(reference, "_warmed", False)
        seen.clear()
        request = {"op": "compile", "seed": 11, "quiet": quiet, "lock": "cpu0", "lock_dir": str(tmp_path),
                   "off_lock": off}
        reference.serve_job(Channel([request, {"op": "next"}]), _job(tmp_path, ""), task)
        held = quiet   # a quiet host's compiles hold the lock shared; the harness keeps no lock otherwise
        assert seen == [("ReLU", None, expect, held), ("Model", "cpu0" if quiet else None, expect, held)], (off, quiet)


def test_a_spares_warm_up_lets_go_of_the_lock_where_its_environment_says_so(monkeypatch):
    """spares.start_reference sets WARM_OFF_LOCK_ENV from EvalConfig.compile_off_lock: the worker's warm-up reads it
    beside WARM_COMPILE_ENV (the lock to hold shared, "" for none)."""
    from cuda_agent.harness.workers.spares import WARM_COMPILE_ENV, WARM_ENV, WARM_OFF_LOCK_ENV

    seen: list[tuple] = []
    monkeypatch.setattr(reference, "_warm_compile", lambda device, lock, off_lock=False: seen.append((lock, off_lock)))
    monkeypatch.delenv(WARM_ENV, raising=False)
    for lock, off in (("cpu0", "1"), ("cpu0", ""), ("", "1")):
        monkeypatch.setenv(WARM_COMPILE_ENV, lock)
        monkeypatch.setenv(WARM_OFF_LOCK_ENV, off)
        reference.serve(Channel([]))   # no job: the warm-up only
    assert seen == [("cpu0", True), ("cpu0", False), ("", True)]


@pytest.mark.slow
def test_a_real_compile_of_the_task_lets_go_of_the_lock_while_it_works_and_holds_it_again_before_its_code_runs(
        tmp_path, monkeypatch):
    """No fake compile: the task's torch.compile on the CPU, through the worker's request, lets go of the lock it
    holds shared (a timer could take it) in its stretches and holds it again when each ends; `off_lock` false
    keeps it held throughout (nothing is let go)."""
    from contextlib import contextmanager

    import torch

    from cuda_agent.measure import baselines
    from measure.lockprobe import would_wait

    task = module_from_source((HACKS / "tasks" / "sbr_small.py").read_text(), "reference", "model.py")
    lock, real = tmp_path / "cpu0.lock", baselines.let_go
    seen: list[tuple[str, bool]] = []

    @contextmanager
    def let_go(key, lock_dir=None):
        with real(key, lock_dir) as went:
            seen.append(("in", went and not would_wait(lock)))   # let go, and a timer could take the lock now
            yield went
        seen.append(("after", would_wait(lock)))   # held again

    monkeypatch.setattr(baselines, "let_go", let_go)
    monkeypatch.setattr(reference, "_warmed", True)   # the task's compile alone
    for off in (False, True):
        torch._dynamo.reset()   # a compile of its own each time (torch's cache would skip TorchDynamo's)
        seen.clear()
        request = {"op": "compile", "seed": 11, "quiet": True, "lock": "cpu0", "lock_dir": str(tmp_path),
                   "off_lock": off}
        channel = Channel([request, {"op": "next"}])
        assert reference.serve_job(channel, _job(tmp_path, ""), task) == {"op": "next"}
        assert channel.replies[-1]["ok"] and channel.replies[-1]["graphs"] >= 1, channel.replies
        assert not would_wait(lock)   # the compile's hold ended with it
        expected = [("in", True), ("after", True)] * (len(seen) // 2) if off else []
        assert seen == expected and (seen or not off), (off, seen)
