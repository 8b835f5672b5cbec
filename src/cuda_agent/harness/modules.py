"""Turning source text into modules and inputs inside worker processes (never in the caller)."""

from __future__ import annotations

import time
import types
from contextlib import contextmanager
from typing import Callable

import torch

from cuda_agent.harness.timing import call_seed

# Bound at import, before a solution's code runs in the child (which could replace them).
_empty_cache, _manual_seed, _perf_counter = torch.cuda.empty_cache, torch.manual_seed, time.perf_counter
_Generator, _randperm, _roll, _clone = torch.Generator, torch.randperm, torch.roll, torch.Tensor.clone


def module_from_source(source: str, name: str, filename: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def to_device(values, device: torch.device) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def make_inputs(task_module: types.ModuleType, seed: int, device: torch.device, variant: int | None = None) -> list:
    """The task's inputs drawn with `seed` (the same in every process for the same seed), and,
    with `variant`, the same inputs with a few values moved (see `near_duplicate`).

    On a GPU, `get_inputs` runs with the GPU as the default device, so its random tensors are
    drawn there (gigabyte inputs in milliseconds instead of seconds on the CPU); a task whose
    `get_inputs` cannot run that way (it needs CPU tensors itself) is drawn on the CPU."""
    inputs = None
    if device.type == "cuda":
        _manual_seed(seed)
        try:
            with torch.device(device):
                inputs = to_device(list(task_module.get_inputs()), device)
        except Exception:
            pass
    if inputs is None:
        _manual_seed(seed)
        inputs = to_device(list(task_module.get_inputs()), device)
    return inputs if variant is None else near_duplicate(inputs, variant)


MOVED = 8  # values moved in each floating-point input of a near-duplicate input set


def near_duplicate(inputs: list, variant: int) -> list:
    """The inputs with the values at MOVED positions of each floating-point tensor rotated among
    those positions (chosen from `variant`): the same values, so still inputs of the task, in
    other places. A result replayed for inputs that look like ones seen before (a cache keyed on
    a sample of their contents) is wrong for these."""
    gen = _Generator().manual_seed(variant)
    out = []
    for v in inputs:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.is_contiguous() and v.numel() > 1:
            v = _clone(v)
            flat = v.view(-1)
            where = _randperm(flat.numel(), generator=gen)[:MOVED].to(flat.device)
            flat[where] = flat[_roll(where, 1)]
        out.append(v)
    return out


def timing_draw(task_module: types.ModuleType, run_seed: int, device: torch.device) -> Callable[[int], list]:
    """The inputs of call i of a timing run: drawn from `call_seed(run_seed, i)`, so the reference
    worker can draw the same inputs again for any call whose output it checks."""
    return lambda i: make_inputs(task_module, call_seed(run_seed, i), device)


def make_model(model_cls, task_module: types.ModuleType, seed: int, device: torch.device) -> torch.nn.Module:
    """`model_cls(*get_init_inputs())` on `device`, seeded as KernelBench does (the seed before the
    init inputs and again before the constructor): the reference and ModelNew made with one seed
    draw the same weights where they create the same parameters in the same order."""
    _manual_seed(seed)
    init = list(task_module.get_init_inputs())
    _manual_seed(seed)
    return model_cls(*init).to(device)


def release(device: torch.device) -> None:
    """Hand the GPU memory this process no longer uses back to the device: the reference worker
    and the solution child share one GPU, and a multi-gigabyte task needs it all in turn."""
    if device.type == "cuda":
        _empty_cache()


class Steps:
    """Seconds spent in each named step of a worker's requests: where an evaluation's time goes
    (diagnostics only, never part of a verdict)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        t0 = _perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + _perf_counter() - t0, 4)
