"""A free evaluator takes, among the first ready requests of the first priority, one of a task it
evaluated last (its reference worker is kept there, the task compiled), else the first in turn."""

from __future__ import annotations

import heapq
from concurrent.futures import Future

from cuda_agent.service.fleet import Slot
from cuda_agent.service.scheduler import AFFINITY_LOOKAHEAD, Item, Scheduler
from cuda_agent.service.settings import ServiceSettings
from cuda_agent.tasks import Task


def _task(name: str) -> Task:
    return Task(name=name, code=f"# the task {name}\n", origin="test")


def _scheduler(items: list[tuple[str, int]]) -> Scheduler:
    sched = Scheduler(ServiceSettings(device="cpu"), "cpu", fleet=None, stats={"affinity": 0})  # type: ignore[arg-type]
    for seq, (name, priority) in enumerate(items):
        item = Item(id=f"{name}{seq}", priority=priority, seq=seq, future=Future(), task=_task(name))
        heapq.heappush(sched._ready, (item.order(), item))
    return sched


def _slot(*tasks: str) -> Slot:
    slot = Slot(index=0, handle=None)
    slot.tasks.extend(_task(t).code for t in tasks)
    return slot


def test_an_evaluator_takes_a_task_it_evaluated_last_out_of_turn():
    sched = _scheduler([("a", 1), ("a", 1), ("b", 1), ("a", 1)])
    got = sched._next_for(_slot("b"))
    assert got.id == "b2" and sched.stats["affinity"] == 1
    assert [sched._next_for(_slot()).id for _ in range(3)] == ["a0", "a1", "a3"]  # the rest in turn


def test_without_such_a_task_or_memory_the_first_in_turn():
    sched = _scheduler([("a", 1), ("b", 1)])
    assert sched._next_for(_slot("c")).id == "a0"
    assert sched._next_for(_slot()).id == "b1"
    assert sched.stats["affinity"] == 0


def test_affinity_never_passes_a_better_priority_or_looks_too_far():
    sched = _scheduler([("a", 0), ("b", 1)])
    assert sched._next_for(_slot("b")).id == "a0"  # the reward before the bench, whatever was compiled
    far = _scheduler([("a", 1)] * AFFINITY_LOOKAHEAD + [("b", 1)])
    assert far._next_for(_slot("b")).id == "a0"


def test_the_slot_remembers_the_last_tasks_and_forgets_them_with_its_evaluator():
    slot = _slot("a", "b", "c")
    assert list(slot.tasks) == [_task("b").code, _task("c").code]  # as many as a harness process keeps


def test_a_request_is_passed_over_no_more_than_the_lookahead_however_many_of_a_kept_task_come():
    sched = _scheduler([("c", 1)] + [("a", 1)] * (3 * AFFINITY_LOOKAHEAD))
    slot = _slot("a")
    taken = [sched._next_for(slot).id for _ in range(AFFINITY_LOOKAHEAD + 1)]
    assert taken[-1] == "c0" and all(t.startswith("a") for t in taken[:-1])
