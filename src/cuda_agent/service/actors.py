"""The service's workers, as Ray actors: an evaluator per device (a GPU, or a slot of the CPU
backend) holding warm harness processes, and CPU-only builders that compile solutions ahead of
the evaluators into the shared, content-addressed build cache."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from cuda_agent.devices import TIMING_CORES_ENV, Backend
from cuda_agent.harness import EvalConfig, EvalResult, keep_warm, prebuild
from cuda_agent.tasks import Task


def write_files(files: dict[str, str], dest: Path) -> Path:
    """A solution's files (relative path -> text) laid out under `dest`."""
    for rel, text in files.items():
        path = (dest / rel).resolve()
        if dest.resolve() not in path.parents:
            raise ValueError(f"{rel}: a solution file outside its folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dest


class JobContext:
    """What a job running on an evaluator sees: its device and state kept on that evaluator
    across jobs (a warm child process, say), closed when the evaluator stops."""

    def __init__(self, device: str, gpu: str | None):
        self.device, self.gpu = device, gpu
        self.state: dict[str, Any] = {}
        self._closers: list[Callable[[], None]] = []

    def on_close(self, fn: Callable[[], None]) -> None:
        self._closers.append(fn)

    def close(self) -> None:
        for fn in reversed(self._closers):
            try:
                fn()
            except Exception:  # closing must go on for the others
                pass
        self._closers.clear()


class Evaluator:
    """One device's evaluator (a Ray actor): evaluations and jobs one at a time, with `spares`
    evaluations' processes started ahead on the background cores."""

    def __init__(self, device: str, spares: int, foreground: list[int] | None, background: list[int] | None,
                 shared_gpu: str | None = None):
        import ray

        if shared_gpu is not None:  # a GPU Ray gave someone else (a trainer's): seen before CUDA starts here
            os.environ["CUDA_VISIBLE_DEVICES"] = shared_gpu
        gpus = [shared_gpu] if shared_gpu is not None else ray.get_gpu_ids() if device == "cuda" else []
        self.gpu = str(gpus[0]) if gpus else None
        self.device = device
        if foreground:  # its timing cores: baseline jobs here and the reference workers it starts time on them
            os.environ[TIMING_CORES_ENV] = ",".join(map(str, sorted(foreground)))
        self.stack = ExitStack()
        self.stack.enter_context(keep_warm(spares, set(foreground) if foreground else None,
                                           set(background) if background else None))
        if background:
            os.sched_setaffinity(0, set(background))  # the actor's own work is bookkeeping
        self.context = JobContext(device, self.gpu)
        self.scratch = Path(tempfile.mkdtemp(prefix="cuda_agent_service_"))

    def describe(self) -> dict[str, Any]:
        import torch

        arch = None
        if self.device == "cuda":
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}"
        import ray

        return {"pid": os.getpid(), "gpu": self.gpu, "device": self.device, "arch": arch,
                "node": os.uname().nodename, "node_id": ray.get_runtime_context().get_node_id()}

    def evaluate(self, task: Task, files: dict[str, str], config: EvalConfig) -> EvalResult:
        from cuda_agent.harness import evaluate

        folder = Path(tempfile.mkdtemp(dir=self.scratch))
        try:
            return evaluate(task, write_files(files, folder / "solution"), config)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def run(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        return fn(self.context, *args, **kwargs)

    def stop(self) -> None:
        self.context.close()
        self.stack.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class Builder:
    """A CPU-only build worker (a Ray actor): the static checks and the build of a solution, for
    the evaluator that takes it next to find its objects in the cache."""

    def __init__(self, cores: list[int] | None, quiet: bool = True):
        if cores:
            os.sched_setaffinity(0, set(cores))  # the compilers it starts inherit these cores
        self.scratch = Path(tempfile.mkdtemp(prefix="cuda_agent_build_"))
        self.quiet = quiet  # False: build beside timing, whatever the request's config says

    def build(self, task: Task, files: dict[str, str], config: EvalConfig, backend: Backend) -> EvalResult | None:
        folder = Path(tempfile.mkdtemp(dir=self.scratch))
        if not self.quiet:
            config = replace(config, quiet_host=False)  # a prebuild only builds: the baselines keep theirs
        try:
            return prebuild(task, write_files(files, folder / "solution"), config, backend)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
