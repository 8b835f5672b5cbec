"""The evaluation service: every evaluation, whoever asks (bench, synth, the agent, the RL
trainer's reward), goes through one `EvalService` on Ray.

On one machine it starts an embedded local Ray by itself; with `address` (or $RAY_ADDRESS) it
runs on an existing cluster. A request travels: a priority queue -> a CPU-only builder (static
checks and build into the shared object cache, ahead of the devices, at most `build_ahead`
waiting) -> the next free device evaluator (warm harness processes, the device's lock to time)
-> exactly one verdict. An evaluator that dies or hangs is replaced and its request run once
more; a second failure is a harness-error verdict, which is never a reward. With a journal, every
request and verdict is written down, and a restarted driver redoes nothing that has a verdict.

Here: the service's life (its Ray, started and shut down) and the ways to ask it. The queues and
retries: scheduler.py; the actors: fleet.py (how many, where, restarted) and actors.py (what runs
in them); keeping N requests in flight: inflight.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import weakref
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

from cuda_agent.devices import default_device
from cuda_agent.harness import EvalConfig, EvalResult, SolutionError, read_solution, workspace_task
from cuda_agent.home import private_ray_tmp
from cuda_agent.service.fleet import Fleet
from cuda_agent.service.scheduler import Scheduler
from cuda_agent.service.settings import PRIORITY_BENCH, ServiceSettings
from cuda_agent.tasks import Task

# This process's services that are running. Ray ends the whole process when any thread touches it
# after a shutdown, so the service that started the Ray closes every other one before shutting it down.
_live: "weakref.WeakSet[EvalService]" = weakref.WeakSet()
_live_lock = threading.Lock()


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
        self.stats = {"evaluations": 0, "jobs": 0, "retries": 0, "restarts": 0, "harness_errors": 0,
                      "from_journal": 0, "prebuilt_failures": 0, "affinity": 0}
        self.fleet = Fleet(self.settings, self.device, self.stats)
        self.scheduler = Scheduler(self.settings, self.device, self.fleet, self.stats)
        self._started_ray = False
        self._ray_tmp: Path | None = None   # the folder of the local Ray's sessions, where this service started one
        self._scratch = Path(tempfile.mkdtemp(prefix="cuda_agent_requests_"))

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
                # "local": a Ray of its own, never the cluster /tmp/ray/ray_current_cluster names (a bare
                # ray.init() joins the last one `ray start` made on this host, and waits on it if it is gone);
                # its sessions in a folder of ours, out of the sandbox users' reach (home.private_ray_tmp)
                self._ray_tmp = private_ray_tmp()
                kwargs["_temp_dir"] = str(self._ray_tmp / "ray")
                try:
                    ray.init(**{"address": "local", **kwargs, **(s.ray_init or {})})
                except BaseException:
                    shutil.rmtree(self._ray_tmp, ignore_errors=True)
                    self._ray_tmp = None
                    raise
            self._started_ray = True
        try:
            if s.journal is not None:
                self.scheduler.resume(Path(s.journal))
            self.fleet.start()
        except BaseException:
            self.close()   # a service that failed to start leaves no actors and no Ray of its own behind
            raise
        self.scheduler.start()
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
        try:
            self.scheduler.stop(wait)
            self.fleet.stop(wait)
            shutil.rmtree(self._scratch, ignore_errors=True)
        finally:
            if self._started_ray:   # whatever failed above, the Ray this service started goes with it
                self._started_ray = False
                ray.shutdown()
            if self._ray_tmp is not None:
                shutil.rmtree(self._ray_tmp, ignore_errors=True)
                self._ray_tmp = None

    # ---- asking ------------------------------------------------------------------------------

    def submit(self, task: Task, files: dict[str, str], config: EvalConfig | None = None, *,
               priority: int = PRIORITY_BENCH, id: str | None = None) -> Future:
        """An evaluation of the solution `files` (relative path -> text, as harness.read_solution
        gives them); its Future gives the EvalResult. A request whose id has a verdict in the
        journal gets that verdict at once."""
        config = config or EvalConfig(device=self.device)
        if config.device is None:
            config = replace(config, device=self.device)
        return self.scheduler.evaluation(id or request_id(task, files, config), priority, task, files, config)

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
            future.set_result(EvalResult.failed(task.name, "static", str(e), config, device=self.device))
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
            return EvalResult.failed("?", "static", str(e), config, device="cpu")
        result = self.evaluate(task, workspace, replace(config, device=config.device or device),
                               priority=priority, keep=keep, id=os.urandom(8).hex())
        if not signed:
            result.flags.append("manifest_unsigned")
        return result

    def call(self, fn: Callable[..., Any], *args: Any, priority: int = PRIORITY_BENCH, **kwargs: Any) -> Future:
        """Run `fn(ctx, *args, **kwargs)` on a device evaluator (ctx: JobContext, with state kept on
        that evaluator); for work that is not the evaluation of a solution (baselines, synth's
        candidates). `fn` must be importable by name (a module-level function)."""
        return self.scheduler.job(fn, args, kwargs, priority)

    @property
    def evaluators(self) -> int:
        return len(self.fleet.slots)
