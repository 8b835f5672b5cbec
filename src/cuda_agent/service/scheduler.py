"""The service's scheduler: its queues and the one thread that serves them.

An evaluation waits in `to_build` for a builder (at most `build_ahead` built and waiting), then in
`ready` for a free evaluator; a job (`EvalService.call`) goes to `ready` at once. Lower priorities
first, then first come. What follows an evaluation is decided by the kind of its outcome, never by
its words: a verdict is kept (and journalled); a verdict whose `fault` is the reference's is run
once more on a fresh evaluator; an evaluator that died or hung is replaced and its request run once
more, then it ends as a harness error (`fault` "harness"), which is never kept as a verdict.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cuda_agent.harness import EvalConfig, EvalResult
from cuda_agent.journal import Journal, read_rows
from cuda_agent.service.fleet import Fleet, Slot
from cuda_agent.service.settings import ServiceError, ServiceSettings
from cuda_agent.tasks import Task

RAY_GONE = "the Ray runtime under the evaluation service was shut down"
AFFINITY_LOOKAHEAD = 16  # ready requests a free evaluator looks through for a task it evaluated last


@dataclass
class Item:
    """A request: an evaluation (task, files, config) or a job (a function run on an evaluator)."""

    id: str
    priority: int
    seq: int
    future: Future
    task: Task | None = None                  # an evaluation ...
    files: dict[str, str] = field(default_factory=dict)
    config: EvalConfig | None = None
    job: tuple[Callable[..., Any], tuple, dict] | None = None   # ... or a job run on an evaluator
    attempts: int = 0
    built: bool = False
    flags: list[str] = field(default_factory=list)

    def order(self) -> tuple[int, int]:
        return self.priority, self.seq


class Scheduler:
    """The queues, what runs where, and the thread that hands requests to the fleet's actors."""

    def __init__(self, settings: ServiceSettings, device: str, fleet: Fleet, stats: dict[str, int]):
        self.settings, self.device, self.fleet, self.stats = settings, device, fleet, stats
        self.lock = threading.Condition()
        self._to_build: list[tuple[tuple[int, int], Item]] = []
        self._ready: list[tuple[tuple[int, int], Item]] = []
        self._inflight: dict[Any, tuple[str, Item, Any]] = {}   # ref -> (kind, item, slot or builder)
        self._seq = itertools.count()
        self._done: dict[str, EvalResult] = {}   # verdicts a journal holds: a resumed driver's, not a cache
        self.journal: Journal | None = None
        self.stopping = False
        self._closed_why = "closed by its owner"
        self._thread: threading.Thread | None = None

    def resume(self, path: Path) -> None:
        """Journal requests and verdicts in `path`, taking up the verdicts it already holds."""
        for row in read_rows(path):
            if row.get("event") == "verdict" and not EvalResult.written_harness_error(row["result"]):
                self._done[row["id"]] = EvalResult.from_dict(row["result"])
        self.journal = Journal(path)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="eval-service", daemon=True)
        self._thread.start()

    # ---- requests ------------------------------------------------------------------------------

    def evaluation(self, rid: str, priority: int, task: Task, files: dict[str, str], config: EvalConfig) -> Future:
        """A request for a verdict; one with a verdict in the journal gets it at once."""
        future: Future = Future()
        with self.lock:
            if rid in self._done:
                self.stats["from_journal"] += 1
                future.set_result(self._done[rid])
                return future
            self._check_open()
            item = Item(rid, priority, next(self._seq), future, task, dict(files), config)
            if self.journal is not None:
                self.journal.append({"event": "request", "id": rid, "task": task.name, "priority": priority,
                                     "files": sorted(files), "at": time.time()})
            heapq.heappush(self._to_build, (item.order(), item))
            self.lock.notify_all()
        return future

    def job(self, fn: Callable[..., Any], args: tuple, kwargs: dict, priority: int) -> Future:
        """A request to run `fn(ctx, *args, **kwargs)` on an evaluator."""
        future: Future = Future()
        with self.lock:
            self._check_open()
            item = Item(f"job-{next(self._seq)}", priority, next(self._seq), future, job=(fn, args, kwargs),
                        built=True)
            heapq.heappush(self._ready, (item.order(), item))
            self.lock.notify_all()
        return future

    def stop(self, wait: bool) -> None:
        """Take no more requests; queued ones end as harness errors. `wait`: the running ones
        finish first (up to a minute), else they end now."""
        with self.lock:
            self.stopping = True
            if not wait:
                self._abandon_running("the service was closed while this request ran")
            self.lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self.journal is not None:
            self.journal.close()

    def _check_open(self) -> None:
        if self.stopping:
            raise ServiceError(f"the evaluation service is closed ({self._closed_why}): start a new one")

    # ---- the thread ----------------------------------------------------------------------------

    def _serve(self) -> None:
        """The scheduler's loop; if it fails (or its Ray is shut down under it), every request still
        waiting gets its verdict or error now, instead of waiting forever on a thread that is gone."""
        import ray

        try:
            self._loop()
        except BaseException as e:
            gone = not ray.is_initialized()
            with self.lock:
                self._fail_all(RAY_GONE if gone else f"the service's scheduler failed: {e!r}")
            if not gone:
                raise

    def _loop(self) -> None:
        import ray

        while True:
            with self.lock:
                if self.stopping and not self._inflight and not self._ready and not self._to_build:
                    return
                if not ray.is_initialized():   # shut down under the service: any Ray call would start a new one
                    self._fail_all(RAY_GONE)
                    return
                if self.stopping and not self._inflight:  # closing with work queued: it gets no verdict
                    self._fail_queued("the service was closed before this request ran")
                    return
                self.fleet.poll_starting()
                self._check_stalled()
                self._dispatch()
                refs = list(self._inflight)
                if not refs:
                    self.lock.wait(0.2)
                    continue
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05, fetch_local=False)
            for ref in done:
                self._finish(ref)
            self._check_deadlines()

    def _dispatch(self) -> None:
        fleet = self.fleet
        waiting = sum(1 for _, it in self._ready if it.job is None)
        building = sum(1 for kind, _, _ in self._inflight.values() if kind == "build")
        while fleet.free_builders and self._to_build and waiting + building < self.settings.build_ahead:
            _, item = heapq.heappop(self._to_build)
            builder = fleet.free_builders.pop()
            ref = builder.build.remote(item.task, item.files, item.config, fleet.backend)
            self._inflight[ref] = ("build", item, builder)
            building += 1
        if not fleet.builders:  # no builder: the evaluators build
            while self._to_build:
                _, item = heapq.heappop(self._to_build)
                heapq.heappush(self._ready, (item.order(), item))
        for slot in fleet.usable():
            if slot.item is None and self._ready:
                item = self._next_for(slot)
                slot.item, slot.started = item, time.monotonic()
                item.attempts += 1
                if item.job is not None:
                    fn, args, kwargs = item.job
                    ref = slot.handle.run.remote(fn, args, kwargs)
                else:
                    ref = slot.handle.evaluate.remote(item.task, item.files, item.config)
                    if item.task.code in slot.tasks:
                        slot.tasks.remove(item.task.code)
                    slot.tasks.append(item.task.code)
                self._inflight[ref] = ("job" if item.job else "eval", item, slot)

    def _next_for(self, slot: Slot) -> Item:
        """The next ready request for `slot`: among the first AFFINITY_LOOKAHEAD of the first
        priority that came no later than AFFINITY_LOOKAHEAD after the first (so none waits on forever),
        the first evaluation of a task the slot's evaluator evaluated last (its reference
        worker is kept there: the task's torch.compile is not paid again, which on a GPU takes seconds
        under the device lock shared and so holds off the other evaluators' timing), else the first."""
        head = self._ready[0][1]
        if slot.tasks:
            for order, item in heapq.nsmallest(AFFINITY_LOOKAHEAD, self._ready):
                # only requests that came within AFFINITY_LOOKAHEAD of the head: it is passed over at most that often
                if order[0] != head.priority or item.seq > head.seq + AFFINITY_LOOKAHEAD:
                    break
                if item.task is not None and item.task.code in slot.tasks:
                    del self._ready[next(i for i, (_, it) in enumerate(self._ready) if it is item)]
                    heapq.heapify(self._ready)
                    if item is not head:
                        self.stats["affinity"] += 1  # taken out of turn for its evaluator's kept reference
                    return item
        return heapq.heappop(self._ready)[1]

    def _finish(self, ref: Any) -> None:
        import ray

        with self.lock:
            if ref not in self._inflight:   # abandoned by stop(wait=False): its request has ended already
                return
            kind, item, where = self._inflight.pop(ref)
        try:
            value = ray.get(ref)
            error: BaseException | None = None
        except ray.exceptions.RayTaskError as e:
            value, error = None, e.as_instanceof_cause()
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError) as e:
            value, error = None, e
        with self.lock:
            if kind == "build":
                self._built(item, where, value, error)
            elif kind == "job":
                self._job_done(item, where, value, error)
            else:
                self._evaluated(item, where, value, error)

    def _built(self, item: Item, builder: Any, value: Any, error: BaseException | None) -> None:
        import ray

        self.fleet.free_builders.append(builder)
        if isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)):
            self.fleet.replace_builder(builder)
        if isinstance(value, EvalResult):  # failed its static checks or build: that is the verdict
            self.stats["prebuilt_failures"] += 1
            self._verdict(item, value)
        else:  # built (or the builder failed: the evaluator builds it itself)
            item.built = True
            heapq.heappush(self._ready, (item.order(), item))

    def _job_done(self, item: Item, slot: Slot, value: Any, error: BaseException | None) -> None:
        slot.item = None
        if _actor_died(error):
            self.fleet.restart(slot, died=True)
            self._retry_or(item, lambda: item.future.set_exception(
                ServiceError(f"the evaluator running {item.id} died twice: {error}")))
        elif error is not None:
            item.future.set_exception(error)
        else:
            self.stats["jobs"] += 1
            item.future.set_result(value)

    def _evaluated(self, item: Item, slot: Slot, value: Any, error: BaseException | None) -> None:
        slot.item = None
        if error is not None:   # the evaluator died, or the harness raised: no verdict from it
            self.fleet.restart(slot, died=_actor_died(error))
            self._retry_or(item, lambda: self._verdict(item, self._harness_error(item, f"{type(error).__name__}: {error}")))
            return
        assert isinstance(value, EvalResult)
        if value.fault == "reference" and item.attempts <= self.settings.retries:
            self.fleet.restart(slot)  # the device may be in a bad state: a fresh evaluator tries again
            self.stats["retries"] += 1
            heapq.heappush(self._ready, (item.order(), item))
            return
        value.flags.extend(f for f in item.flags if f not in value.flags)
        self._verdict(item, value)

    def _retry_or(self, item: Item, give_up: Callable[[], None]) -> None:
        if item.attempts <= self.settings.retries:
            self.stats["retries"] += 1
            item.flags.append("retried")
            heapq.heappush(self._ready, (item.order(), item))
        else:
            give_up()

    def _check_deadlines(self) -> None:
        import ray

        now = time.monotonic()
        with self.lock:
            for kind, item, slot in list(self._inflight.values()):
                if kind == "build" or item.config is None:
                    continue
                limit = item.config.timeout_s + item.config.build_timeout_s + self.settings.timeout_margin_s
                if now - slot.started > limit:
                    ray.kill(slot.handle)  # _finish sees the actor die: replaced, retried once
                    item.flags.append("evaluator_timed_out")

    def _check_stalled(self) -> None:
        """No evaluator has been able to take work for `placement_timeout_s` (every one was replaced and
        Ray can place none: their node, or its GPUs, gone): what waits ends now with the reason, instead
        of waiting for resources that may never come back. The replacements stay asked for: if the
        resources return, the service serves again."""
        import ray

        stalled = self.fleet.stalled_s()
        if stalled > self.settings.placement_timeout_s and self._ready:
            why = (f"no evaluator could be started for {stalled:.0f} s (Ray cannot place one; its free resources: "
                   f"{ray.available_resources()}): was a node lost? Start it again, or a service that asks for "
                   f"fewer GPUs (--gpus)")
            self._fail_queued(why, heaps=(self._ready,))

    # ---- verdicts and ends ---------------------------------------------------------------------

    def _harness_error(self, item: Item, why: str) -> EvalResult:
        self.stats["harness_errors"] += 1
        return EvalResult.failed(item.task.name if item.task else item.id, "run", f"harness error: {why}"[:500],
                                 item.config or EvalConfig(), device=self.device, fault="harness", flags=item.flags)

    def _verdict(self, item: Item, result: EvalResult) -> None:
        self.stats["evaluations"] += 1
        if self.journal is not None:
            self.journal.append({"event": "verdict", "id": item.id, "result": result.to_dict(), "at": time.time()})
            if not result.harness_error:
                self._done[item.id] = result
        item.future.set_result(result)

    def _fail_all(self, why: str) -> None:
        """Every request in flight and queued ends now, with `why`, and the scheduler takes no
        more: nothing is left waiting forever."""
        self.stopping, self._closed_why = True, why
        self._abandon_running(why)
        self._fail_queued(why)

    def _abandon_running(self, why: str) -> None:
        """Every request running now ends with `why`."""
        for _, item, _ in self._inflight.values():
            self._end(item, why)
        self._inflight.clear()

    def _fail_queued(self, why: str, heaps: tuple | None = None) -> None:
        for heap in heaps or (self._to_build, self._ready):
            while heap:
                _, item = heapq.heappop(heap)
                self._end(item, why)

    def _end(self, item: Item, why: str) -> None:
        """A request that gets no verdict: a job's future raises, an evaluation's is a harness error."""
        if item.job is not None:
            item.future.set_exception(ServiceError(why))
        else:
            item.future.set_result(self._harness_error(item, why))


def _actor_died(error: BaseException | None) -> bool:
    import ray

    return isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                              ray.exceptions.ObjectLostError))
