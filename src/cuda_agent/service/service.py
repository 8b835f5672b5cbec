"""The evaluation service: every evaluation, whoever asks (bench, synth, the agent, the RL
trainer's reward), goes through one `EvalService` on Ray.

On one machine it starts an embedded local Ray by itself; with `address` (or $RAY_ADDRESS) it
runs on an existing cluster. A request travels: a priority queue -> a CPU-only builder (static
checks and build into the shared object cache, ahead of the devices, at most `build_ahead`
waiting) -> the next free device evaluator (warm harness processes, the device's lock to time)
-> exactly one verdict. An evaluator that dies or hangs is replaced and its request run once
more; a second failure is a harness-error verdict, which is never a reward. With a journal, every
request and verdict is written down, and a restarted driver redoes nothing that has a verdict.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
import weakref
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from cuda_agent.devices import default_device
from cuda_agent.harness import (Backend, EvalConfig, EvalResult, SolutionError, read_solution, workspace_task)
from cuda_agent.journal import Journal, read_rows
from cuda_agent.service.evaluator import Builder, Evaluator
from cuda_agent.service.settings import PRIORITY_BENCH, ServiceSettings
from cuda_agent.tasks import Task

HARNESS_ERROR = "harness_error"
MAX_BUILDERS = 8  # by default: enough to build ahead of a GPU; each is a process holding torch
_REFERENCE_FAULT = ("the reference itself failed", "the reference worker ")


class ServiceError(RuntimeError):
    """The service cannot start or serve as asked; the message says what to do."""


@dataclass
class _Item:
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


@dataclass
class _Slot:
    """An evaluator actor and what it is doing."""

    index: int
    handle: Any
    item: _Item | None = None
    started: float = 0.0


RAY_GONE = "the Ray runtime under the evaluation service was shut down"
# This process's services that are running. Ray ends the whole process when any thread touches it
# after a shutdown, so the service that started the Ray closes every other one before shutting it down.
_live: "weakref.WeakSet[EvalService]" = weakref.WeakSet()
_live_lock = threading.Lock()


def _kill(handle: Any) -> None:
    """Kill an actor; one that is already gone (or a Ray already shut down) is not an error at close."""
    import ray

    try:
        ray.kill(handle)
    except Exception:
        pass


def request_id(task: Task, files: dict[str, str], config: EvalConfig) -> str:
    """A content address for an evaluation: the same task, files and settings give the same id."""
    blob = json.dumps({"task": task.code, "files": files, "config": repr(config)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@contextmanager
def using(service: "EvalService | None", settings: ServiceSettings) -> Iterator["EvalService"]:
    """`service` itself, or a service started with `settings` for the block and closed after it."""
    if service is not None:
        yield service
        return
    with EvalService(settings) as svc:
        yield svc


def _quiet_token_auth_notice() -> None:
    """Ray (2.60 here) turns token authentication on for a new local cluster and says so on every start
    ("Set RAY_AUTH_MODE=disabled to opt out"), a warning on every command that is none of the user's
    business. Auth stays on as Ray chose; only that notice is dropped. (Setting RAY_AUTH_MODE=token
    would say the same without a warning, but Ray reads it at import, and ray may be imported already.)"""
    import logging

    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)


class EvalService:
    """The one evaluation service (use as a context manager, or `start()` and `close()`)."""

    def __init__(self, settings: ServiceSettings | None = None):
        self.settings = settings or ServiceSettings()
        self.device = self.settings.device or default_device()
        self._lock = threading.Condition()
        self._to_build: list[tuple[tuple[int, int], _Item]] = []
        self._ready: list[tuple[tuple[int, int], _Item]] = []
        self._inflight: dict[Any, tuple[str, _Item, Any]] = {}   # ref -> (kind, item, slot or builder)
        self._slots: list[_Slot] = []
        self._builders: list[Any] = []
        self._free_builders: list[Any] = []
        self._seq = itertools.count()
        self._done: dict[str, EvalResult] = {}
        self._journal: Journal | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._closed_why = "closed by its owner"
        self._started_ray = False
        self._backend: Backend | None = None
        self._scratch = Path(tempfile.mkdtemp(prefix="cuda_agent_requests_"))
        self.stats = {"evaluations": 0, "jobs": 0, "retries": 0, "restarts": 0, "harness_errors": 0,
                      "from_journal": 0, "prebuilt_failures": 0}

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "EvalService":
        import ray

        s = self.settings
        if not ray.is_initialized():
            address = s.resolved_address()
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            kwargs: dict[str, Any] = {"include_dashboard": False, "configure_logging": True,
                                      "logging_level": "warning", "log_to_driver": False}
            if address:
                ray.init(address=address, **kwargs)
            else:
                _quiet_token_auth_notice()
                ray.init(**{**kwargs, **(s.ray_init or {})})
            self._started_ray = True
        try:
            if s.journal is not None:
                self._load_journal(Path(s.journal))
            self._start_workers()
        except BaseException:
            self.close()   # a service that failed to start leaves no actors and no Ray of its own behind
            raise
        self._thread = threading.Thread(target=self._schedule, name="eval-service", daemon=True)
        self._thread.start()
        with _live_lock:
            _live.add(self)
        return self

    @property
    def owns_ray(self) -> bool:
        """Whether this service started the Ray it runs on (and shuts it down when it closes)."""
        return self._started_ray

    def __enter__(self) -> "EvalService":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, wait: bool = True) -> None:
        """Stop taking requests; queued ones end as harness errors. `wait`: the evaluations running
        now finish and keep their verdicts (up to a minute); else they are abandoned at once (their
        requests end as harness errors, the evaluators and what they started are killed): for a
        process that is going away, where nobody reads those verdicts."""
        import ray

        with _live_lock:
            _live.discard(self)
            others = list(_live) if self._started_ray else []
        for other in others:   # they run on the Ray this one is about to shut down
            other.close(wait)
        with self._lock:
            self._stopping = True
            if not wait:
                self._abandon_running("the service was closed while this request ran")
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        try:
            if not ray.is_initialized():   # the Ray went first (shut down by its owner): so did the actors;
                self._slots, self._builders = [], []   # calling them would start a new Ray by itself
            for slot in self._slots:
                if wait:   # a busy actor would answer only after its evaluation: not waited for when abandoning
                    try:
                        ray.get(slot.handle.stop.remote(), timeout=30)
                    except Exception:  # a dead or hung actor: killed below
                        pass
                _kill(slot.handle)
            for b in self._builders:
                _kill(b)
            self._slots, self._builders = [], []
            if self._journal is not None:
                self._journal.close()
            shutil.rmtree(self._scratch, ignore_errors=True)
        finally:
            if self._started_ray:   # whatever failed above, the Ray this service started goes with it
                self._started_ray = False
                ray.shutdown()

    def _start_workers(self) -> None:
        import ray

        s = self.settings
        resources = ray.cluster_resources()
        if self.device == "cuda" and s.shared_gpu is not None:
            count = s.evaluators_per_device
        elif self.device == "cuda":
            gpus = int(resources.get("GPU", 0))
            if gpus == 0:
                raise ServiceError("the service was asked for cuda but Ray sees no GPU; use device='cpu' "
                                   "(--device cpu), or start Ray with the GPUs")
            gpus = min(gpus, s.gpus or gpus)
            count = gpus * s.evaluators_per_device
        else:
            count = s.cpu_evaluators
        cores = int(resources.get("CPU", os.cpu_count() or 1))
        foreground, background = self._core_plan(count)
        spares = s.spares if s.spares is not None else (3 if self.device == "cuda" else 1)
        for i in range(count):
            self._slots.append(_Slot(i, self._new_evaluator(foreground[i] if foreground else None, background, spares)))
        try:
            described = ray.get([slot.handle.describe.remote() for slot in self._slots], timeout=600)
        except ray.exceptions.GetTimeoutError:
            raise ServiceError(f"Ray could not start {count} evaluator(s) in 10 minutes (its resources: "
                               f"{ray.available_resources()}); ask for fewer (--gpus, --workers)") from None
        arch = next((d["arch"] for d in described if d.get("arch")), None)
        self._backend = Backend(self.device, arch)  # type: ignore[arg-type]
        # Builders take a CPU each (their compilers use it); evaluators take none (their harness
        # processes are the device's), so several services can share one Ray.
        free = int(ray.available_resources().get("CPU", 0))
        wanted = s.build_workers if s.build_workers is not None else max(1, min(MAX_BUILDERS, cores - 2 * count - 1))
        builder = ray.remote(Builder).options(num_cpus=1)
        self._builders = [builder.remote(background, s.quiet_builds) for _ in range(min(wanted, free))]
        self._free_builders = list(self._builders)

    def _new_evaluator(self, foreground: list[int] | None, background: list[int] | None, spares: int) -> Any:
        import ray

        options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1}
        if self.device == "cuda" and self.settings.shared_gpu is None:
            options["num_gpus"] = 1.0 / self.settings.evaluators_per_device
        return ray.remote(Evaluator).options(**options).remote(self.device, spares, foreground, background,
                                                               self.settings.shared_gpu)

    def _core_plan(self, evaluators: int) -> tuple[list[list[int]] | None, list[int] | None]:
        """Two cores of its own for each evaluator's solution child (the process that times), the
        rest for builds, start-ups and reference workers; only on a local Ray with room for it."""
        if not self.settings.pin_cores or self.settings.resolved_address():
            return None, None
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2 * evaluators + 2:
            return None, None
        # From the end: the first cores take most of the machine's interrupts and housekeeping.
        foreground = [cores[len(cores) - 2 * i - 2:len(cores) - 2 * i] for i in range(evaluators)]
        return foreground, cores[:len(cores) - 2 * evaluators]

    # ---- asking ------------------------------------------------------------------------------

    def submit(self, task: Task, files: dict[str, str], config: EvalConfig | None = None, *,
               priority: int = PRIORITY_BENCH, id: str | None = None) -> Future:
        """An evaluation of the solution `files` (relative path -> text, as harness.read_solution
        gives them); its Future gives the EvalResult. A request whose id has a verdict in the
        journal gets that verdict at once."""
        config = config or EvalConfig(device=self.device)
        if config.device is None:
            config = replace(config, device=self.device)
        rid = id or request_id(task, files, config)
        future: Future = Future()
        with self._lock:
            if rid in self._done:
                self.stats["from_journal"] += 1
                future.set_result(self._done[rid])
                return future
            self._check_open()
            item = _Item(rid, priority, next(self._seq), future, task, dict(files), config)
            if self._journal is not None:
                self._journal.append({"event": "request", "id": rid, "task": task.name, "priority": priority,
                                      "files": sorted(files), "at": time.time()})
            heapq.heappush(self._to_build, (item.order(), item))
            self._lock.notify_all()
        return future

    def evaluate(self, task: Task, solution: str | Path, config: EvalConfig | None = None, *,
                 priority: int = PRIORITY_BENCH, id: str | None = None, keep: Path | None = None) -> EvalResult:
        """`harness.evaluate`, through the service: the solution is read once here (its snapshot
        left in `keep`), then judged on an evaluator."""
        return self.submit_path(task, solution, config, priority=priority, id=id, keep=keep).result()

    def submit_path(self, task: Task, solution: str | Path, config: EvalConfig | None = None, *,
                    priority: int = PRIORITY_BENCH, id: str | None = None, keep: Path | None = None) -> Future:
        """`submit` for a solution folder or file: read here, as the harness reads it."""
        config = config or EvalConfig(device=self.device)
        dest = keep or Path(tempfile.mkdtemp(dir=self._scratch))
        try:
            files = read_solution(solution, dest)
        except SolutionError as e:
            future: Future = Future()
            future.set_result(EvalResult(task=task.name, reward=config.reward.failed, correct=False, stage="static",
                                         reason=str(e), device=self.device, policy=config.policy))
            return future
        finally:
            if keep is None:
                shutil.rmtree(dest, ignore_errors=True)
        return self.submit(task, files, config, priority=priority, id=id)

    def evaluate_workspace(self, workspace: str | Path, config: EvalConfig | None = None, *,
                           priority: int = PRIORITY_BENCH, keep: Path | None = None) -> EvalResult:
        """`harness.evaluate_workspace`, through the service."""
        config = config or EvalConfig()
        try:
            task, device, signed = workspace_task(workspace)
        except SolutionError as e:
            return EvalResult(task="?", reward=config.reward.failed, correct=False, stage="static", reason=str(e))
        result = self.evaluate(task, workspace, replace(config, device=config.device or device),
                               priority=priority, keep=keep, id=os.urandom(8).hex())
        if not signed:
            result.flags.append("manifest_unsigned")
        return result

    def call(self, fn: Callable[..., Any], *args: Any, priority: int = PRIORITY_BENCH, **kwargs: Any) -> Future:
        """Run `fn(ctx, *args, **kwargs)` on a device evaluator (ctx: JobContext, with state kept on
        that evaluator); for work that is not the evaluation of a solution (baselines, synth's
        candidates). `fn` must be importable by name (a module-level function)."""
        future: Future = Future()
        with self._lock:
            self._check_open()
            item = _Item(f"job-{next(self._seq)}", priority, next(self._seq), future, job=(fn, args, kwargs),
                         built=True)
            heapq.heappush(self._ready, (item.order(), item))
            self._lock.notify_all()
        return future

    def map(self, fn: Callable[..., Any], argss: Iterable[tuple], *, priority: int = PRIORITY_BENCH) -> Iterator[Any]:
        """`call(fn, *args)` for each args, results as they finish (in any order) as (args, result or
        exception)."""
        futures = {self.call(fn, *a, priority=priority): a for a in argss}
        from concurrent.futures import as_completed

        for f in as_completed(futures):
            yield futures[f], (f.exception() or f.result())

    @property
    def evaluators(self) -> int:
        return len(self._slots)

    # ---- the scheduler (one thread) --------------------------------------------------------

    def _schedule(self) -> None:
        """The scheduler's loop; if it fails (or its Ray is shut down under it), every request still
        waiting gets its verdict or error now, instead of waiting forever on a thread that is gone."""
        import ray

        try:
            self._schedule_loop()
        except BaseException as e:
            gone = not ray.is_initialized()
            with self._lock:
                self._fail_gone(RAY_GONE if gone else f"the service's scheduler failed: {e!r}")
            if not gone:
                raise

    def _schedule_loop(self) -> None:
        import ray

        while True:
            with self._lock:
                if self._stopping and not self._inflight and not self._ready and not self._to_build:
                    return
                if not ray.is_initialized():   # shut down under the service: any Ray call would start a new one
                    self._fail_gone(RAY_GONE)
                    return
                if self._stopping and not self._inflight:  # closing with work queued: it gets no verdict
                    self._fail_queued("the service was closed before this request ran")
                    return
                self._dispatch()
                refs = list(self._inflight)
                if not refs:
                    self._lock.wait(0.2)
                    continue
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05, fetch_local=False)
            for ref in done:
                self._finish(ref)
            self._check_deadlines()

    def _dispatch(self) -> None:
        waiting = sum(1 for _, it in self._ready if it.job is None)
        building = sum(1 for kind, _, _ in self._inflight.values() if kind == "build")
        while self._free_builders and self._to_build and waiting + building < self.settings.build_ahead:
            _, item = heapq.heappop(self._to_build)
            builder = self._free_builders.pop()
            ref = builder.build.remote(item.task, item.files, item.config, self._backend)
            self._inflight[ref] = ("build", item, builder)
            building += 1
        if not self._builders:  # no builder: the evaluators build
            while self._to_build:
                _, item = heapq.heappop(self._to_build)
                heapq.heappush(self._ready, (item.order(), item))
        for slot in self._slots:
            if slot.item is None and self._ready:
                _, item = heapq.heappop(self._ready)
                slot.item, slot.started = item, time.monotonic()
                item.attempts += 1
                if item.job is not None:
                    fn, args, kwargs = item.job
                    ref = slot.handle.run.remote(fn, args, kwargs)
                else:
                    ref = slot.handle.evaluate.remote(item.task, item.files, item.config)
                self._inflight[ref] = ("job" if item.job else "eval", item, slot)

    def _finish(self, ref: Any) -> None:
        import ray

        with self._lock:
            if ref not in self._inflight:   # abandoned by close(wait=False): its request has ended already
                return
            kind, item, where = self._inflight.pop(ref)
        try:
            value = ray.get(ref)
            error: BaseException | None = None
        except ray.exceptions.RayTaskError as e:
            value, error = None, e.as_instanceof_cause()
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError) as e:
            value, error = None, e
        with self._lock:
            if kind == "build":
                self._free_builders.append(where)
                if isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)):
                    self._replace_builder(where)
                if isinstance(value, EvalResult):  # failed its static checks or build: that is the verdict
                    self.stats["prebuilt_failures"] += 1
                    self._verdict(item, value)
                else:  # built (or the builder failed: the evaluator builds it itself)
                    item.built = True
                    heapq.heappush(self._ready, (item.order(), item))
                return
            where.item = None
            actor_died = isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                                            ray.exceptions.ObjectLostError))
            if kind == "job":
                if actor_died:
                    self._restart(where)
                    self._retry_or(item, lambda: item.future.set_exception(
                        ServiceError(f"the evaluator running {item.id} died twice: {error}")))
                elif error is not None:
                    item.future.set_exception(error)
                else:
                    self.stats["jobs"] += 1
                    item.future.set_result(value)
                return
            if actor_died or error is not None:
                self._restart(where)
                self._retry_or(item, lambda: self._verdict(item, self._harness_error(item, f"{type(error).__name__}: {error}")))
                return
            if isinstance(value, EvalResult) and value.reason.startswith(_REFERENCE_FAULT) and item.attempts <= self.settings.retries:
                self._restart(where)  # the device may be in a bad state: a fresh evaluator tries again
                self.stats["retries"] += 1
                heapq.heappush(self._ready, (item.order(), item))
                return
            value.flags.extend(f for f in item.flags if f not in value.flags)
            self._verdict(item, value)

    def _retry_or(self, item: _Item, give_up: Callable[[], None]) -> None:
        if item.attempts <= self.settings.retries:
            self.stats["retries"] += 1
            item.flags.append("retried")
            heapq.heappush(self._ready, (item.order(), item))
        else:
            give_up()

    def _check_deadlines(self) -> None:
        import ray

        now = time.monotonic()
        with self._lock:
            for ref, (kind, item, slot) in list(self._inflight.items()):
                if kind == "build" or item.config is None:
                    continue
                limit = item.config.timeout_s + item.config.build_timeout_s + self.settings.timeout_margin_s
                if now - slot.started > limit:
                    ray.kill(slot.handle)  # _finish sees the actor die: replaced, retried once
                    item.flags.append("evaluator_timed_out")

    def _restart(self, slot: _Slot) -> None:
        import ray

        self.stats["restarts"] += 1
        try:
            ray.kill(slot.handle)
        except Exception:  # already gone
            pass
        s = self.settings
        foreground, background = self._core_plan(len(self._slots))
        spares = s.spares if s.spares is not None else (3 if self.device == "cuda" else 1)
        slot.handle = self._new_evaluator(foreground[slot.index] if foreground else None, background, spares)

    def _replace_builder(self, dead: Any) -> None:
        import ray

        self._builders.remove(dead)
        if dead in self._free_builders:
            self._free_builders.remove(dead)
        fresh = ray.remote(Builder).options(num_cpus=1).remote(self._core_plan(len(self._slots))[1],
                                                                self.settings.quiet_builds)
        self._builders.append(fresh)
        self._free_builders.append(fresh)

    def _harness_error(self, item: _Item, why: str) -> EvalResult:
        self.stats["harness_errors"] += 1
        config = item.config or EvalConfig()
        return EvalResult(task=item.task.name if item.task else item.id, reward=config.reward.failed, correct=False,
                          stage="run", reason=f"harness error: {why}"[:500], device=self.device, policy=config.policy,
                          flags=[HARNESS_ERROR, *item.flags])

    def _verdict(self, item: _Item, result: EvalResult) -> None:
        self.stats["evaluations"] += 1
        if self._journal is not None:
            self._journal.append({"event": "verdict", "id": item.id, "result": result.to_dict(), "at": time.time()})
        if self._journal is not None and HARNESS_ERROR not in result.flags:  # a resumed driver's, not a cache
            self._done[item.id] = result
        item.future.set_result(result)

    def _check_open(self) -> None:
        if self._stopping:
            raise ServiceError(f"the evaluation service is closed ({self._closed_why}): start a new one")

    def _fail_gone(self, why: str) -> None:
        """Every request in flight and queued ends now, with `why`, and the service takes no more:
        nothing is left waiting forever."""
        self._stopping, self._closed_why = True, why
        self._abandon_running(why)
        self._fail_queued(why)

    def _abandon_running(self, why: str) -> None:
        """Every request running now ends with `why`."""
        for _, item, _ in self._inflight.values():
            self._end(item, why)
        self._inflight.clear()

    def _fail_queued(self, why: str) -> None:
        for heap in (self._to_build, self._ready):
            while heap:
                _, item = heapq.heappop(heap)
                self._end(item, why)

    def _end(self, item: _Item, why: str) -> None:
        """A request that gets no verdict: a job's future raises, an evaluation's is a harness error."""
        if item.job is not None:
            item.future.set_exception(ServiceError(why))
        else:
            item.future.set_result(self._harness_error(item, why))

    def _load_journal(self, path: Path) -> None:
        for row in read_rows(path):
            if row.get("event") == "verdict" and HARNESS_ERROR not in (row["result"].get("flags") or []):
                self._done[row["id"]] = EvalResult.from_dict(row["result"])
        self._journal = Journal(path)
