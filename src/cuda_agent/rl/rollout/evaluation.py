"""The harness behind an RL rollout's tools: verify and profile go to the evaluation service
(`cuda_agent.service.EvalService`) at `PRIORITY_REWARD`, ahead of bench and synth work, because a
training step waits on them. One service per agent-loop worker process, started on first use in the
Ray cluster the worker runs in, and shared by every trajectory of that worker.

On a machine whose GPUs the trainer holds (one GPU, colocated), give the service the trainer's GPU
with the loop option `service: {shared_gpu: "0"}`: its evaluators then run there without asking Ray
for it (timing shares the device with training: a fidelity risk the docs name). Otherwise its CUDA
evaluators each need a GPU the trainer does not hold, and with none free it refuses to start
instead of waiting forever.

`compile` is a build only (no verdict, no reward) and runs in the worker's process, with the
toolchain of that machine; the service's builders share the same content-addressed object cache.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

from cuda_agent.agent.evaluator import Evaluator, WorkspaceEvaluator
from cuda_agent.harness import TimingPlan
from cuda_agent.service import PRIORITY_REWARD, EvalService, ServiceError, ServiceSettings

EVALUATORS = ("service",)
# How RL judges a solution on both reward routes (a single-turn reply, rl/workers/reward.py; the agent
# loop's verify and profile, rl/rollout/agent_loop.py): timed briefly, since a training step waits on it, and
# by one plan, so that both routes time alike and share their baselines (cached per plan).
RL_TIMING = TimingPlan(min_runs=10, max_runs=200, budget_s=0.5, warmup_s=0.05, min_warmup=2)
EvaluatorFactory = Callable[[Path, str, TimingPlan], Evaluator]

_services: dict[str, EvalService] = {}
_services_lock = threading.Lock()


def shared_service(settings: ServiceSettings) -> EvalService:
    """This process's service for `settings`, started on first use and closed when the process exits."""
    key = repr(settings)
    with _services_lock:
        service = _services.get(key)
        if service is None:
            _check_gpus(settings)
            service = _services[key] = EvalService(settings).start()
            atexit.register(service.close)
        return service


def close_shared_services() -> None:
    """Close this process's services now (a worker's close when it exits; tests close them sooner).
    Evaluations still running are abandoned: the process that asked for them is done with them."""
    with _services_lock:
        services = sorted(_services.values(), key=lambda svc: svc.owns_ray)   # the Ray's owner last
        _services.clear()
        for service in services:
            service.close(wait=False)


def _check_gpus(settings: ServiceSettings) -> None:
    import ray

    if settings.device != "cuda" or settings.shared_gpu is not None or not ray.is_initialized():
        return
    free = ray.available_resources().get("GPU", 0)
    if free < 1.0 / max(settings.evaluators_per_device, 1):
        raise ServiceError(f"the evaluation service needs a GPU for its evaluators, but the Ray cluster has {free:g} "
                           "free (the trainer holds the others): give the trainer fewer GPUs "
                           "(trainer.n_gpus_per_node) than the node has, or share the trainer's GPU with the "
                           "loop option `service: {shared_gpu: \"0\"}`")


def service_settings(device: str, options: dict[str, Any] | None) -> ServiceSettings:
    """ServiceSettings from the loop's `service` options (any of its fields), on `device`."""
    options = dict(options or {})
    known = {f.name for f in fields(ServiceSettings)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"cuda_agent loop: unknown service option(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    options["device"] = device
    return ServiceSettings(**options)


def make_evaluator_factory(kind: str, device: str, service: dict[str, Any] | None = None) -> EvaluatorFactory:
    """What `open_run` calls to make a workspace's harness: the evaluation service at PRIORITY_REWARD."""
    if kind != "service":
        raise ValueError(f"cuda_agent loop: unknown evaluator {kind!r}; every evaluation goes through the "
                         "evaluation service (`evaluator: service`)")
    svc = shared_service(service_settings(device, service))
    return lambda workspace, device, timing: WorkspaceEvaluator(workspace, device, timing, svc, PRIORITY_REWARD)
