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

from cuda_agent.bench.run import HARNESS_ERROR, BenchSpec, run_task
from cuda_agent.harness.spares import keep_warm
from cuda_agent.bench.solutions import SolutionsDir
from cuda_agent.tasks import Task

_POLL_S = 2.0


def _worker(gpu: str, spec: BenchSpec, jobs: Any, results: Any, parent: int) -> None:
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


def _start(ctx: Any, gpu: str, spec: BenchSpec, results: Any) -> _Worker:
    jobs = ctx.Queue()
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu   # a spawned child copies the environment at start
    try:
        p = ctx.Process(target=_worker, args=(gpu, spec, jobs, results, os.getpid()), name=f"bench-gpu{gpu}")
        p.start()
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    return _Worker(gpu, p, jobs)


def _died(w: _Worker, spec: BenchSpec) -> dict[str, Any]:
    task = w.task
    assert task is not None
    return {"task": task.name, "level": task.level, "problem_id": task.problem_id, "task_sha256": task.sha256,
            "reward": spec.eval_config.reward.failed, "correct": False, "stage": "run", "milestone": "failed",
            "reason": f"harness error: the worker on GPU {w.gpu} died (exit code {w.process.exitcode})",
            "device": spec.device, "flags": [HARNESS_ERROR], "speedup_vs_eager": None,
            "speedup_vs_compile": None}


def run_parallel(pending: list[Task], spec: BenchSpec, gpus: list[str],
                 record: Callable[[dict[str, Any]], None], deadline: float | None) -> bool:
    """Run `pending` over one worker per GPU id; returns True when stopped early by `deadline`."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    workers = {g: _start(ctx, g, spec, results) for g in gpus}
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
                        record(_died(workers[g], spec))
                    if todo:
                        workers[g] = _start(ctx, g, spec, results)
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
