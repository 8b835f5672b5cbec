"""One worker process per GPU: each sees only its GPU (CUDA_VISIBLE_DEVICES), takes one task at a
time from this process, and sends back its results line. This process alone writes results.jsonl.

A worker that dies (a crash that killed the whole process) has its task recorded as a harness error
(retried on resume) and is replaced. Workers exit when this process goes away.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from dataclasses import dataclass
from typing import Any, Callable

from cuda_agent.bench.solutions import SolutionsDir
from cuda_agent.harness import keep_warm
from cuda_agent.tasks import Task

_POLL_S = 2.0


def _worker(gpu: str, spec: Any, jobs: Any, results: Any, parent: int, run_task: Callable) -> None:
    solutions = SolutionsDir(spec.solutions) if spec.solutions else None
    results.put(("ready", gpu, None))
    with keep_warm():  # the next evaluation's processes start while this one runs
        while os.getppid() == parent:
            try:
                task = jobs.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if task is None:
                return
            results.put(("done", gpu, run_task(task, spec, solutions)))


@dataclass
class _Worker:
    gpu: str
    process: Any
    jobs: Any
    task: Task | None = None


def _start(ctx: Any, gpu: str, spec: Any, results: Any, run_task: Callable) -> _Worker:
    jobs = ctx.Queue()
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu   # a spawned child copies the environment at start
    try:
        p = ctx.Process(target=_worker, args=(gpu, spec, jobs, results, os.getpid(), run_task), name=f"bench-gpu{gpu}")
        p.start()
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    return _Worker(gpu, p, jobs)


def run_parallel(pending: list[Task], spec: Any, gpus: list[str], record: Callable[[dict[str, Any]], None],
                 deadline: float | None, run_task: Callable, died_row: Callable) -> bool:
    """Run `pending` over one worker per GPU id, each turning a task into a results line with
    `run_task(task, spec, solutions)` (`died_row(task, spec, why)` where its worker died); returns
    True when stopped early by `deadline`."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    workers = {g: _start(ctx, g, spec, results, run_task) for g in gpus}
    active = set(workers)           # workers not yet told to stop
    todo = list(pending)
    stopped = False

    def next_task() -> Task | None:
        nonlocal stopped
        if todo and deadline and time.monotonic() > deadline:
            stopped = True
            todo.clear()
        return todo.pop(0) if todo else None

    try:
        while active:
            try:
                kind, gpu, row = results.get(timeout=_POLL_S)
            except queue.Empty:
                for g in [g for g in active if not workers[g].process.is_alive()]:
                    if workers[g].task is not None:
                        w = workers[g]
                        record(died_row(w.task, spec, f"the worker on GPU {g} died (exit code {w.process.exitcode})"))
                    if todo:
                        workers[g] = _start(ctx, g, spec, results, run_task)
                    else:
                        active.discard(g)
                continue
            w = workers[gpu]
            if kind == "done":
                record(row)
            w.task = next_task()
            w.jobs.put(w.task)
            if w.task is None:
                active.discard(gpu)
    finally:
        for w in workers.values():
            w.jobs.put(None)
        for w in workers.values():
            w.process.join(timeout=30)
            if w.process.is_alive():
                w.process.terminate()
    return stopped
