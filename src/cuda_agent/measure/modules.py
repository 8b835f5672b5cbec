"""A task's module and its inputs: source text made a module, the model built and seeded as
KernelBench does, inputs drawn from a seed (and the sets made from them, variants.py), inside the
processes that run them (never in the caller)."""

from __future__ import annotations

import time
import types
from contextlib import contextmanager
from typing import Callable

import torch

from cuda_agent.measure.timing import call_seed
from cuda_agent.measure.variants import near_duplicate, shifted

# Bound at import, before a solution's code runs in the child (which could replace them).
_empty_cache, _manual_seed, _perf_counter = torch.cuda.empty_cache, torch.manual_seed, time.perf_counter
_seed_cpu, _seed_gpus, _cuda_started = torch.default_generator.manual_seed, torch.cuda.manual_seed_all, \
    torch.cuda.is_initialized


def seed_generators(seed: int, device: torch.device) -> None:
    """What torch.manual_seed(seed) does to the generators a draw on `device` reads (the CPU's, and
    every GPU's where `device` is one or CUDA is started), without its cost: torch.manual_seed also
    seeds backends this process never starts (XPU), each formatting the caller's stack to queue the
    seed for later: 0.66 ms a call on an H100's host (torch 2.11), 12 of them in each timed replay
    of the demo's graphs, whose request took 4.5 ms (benchmarks/call_overhead_probe.py)."""
    _seed_cpu(seed)
    if device.type == "cuda" or _cuda_started():
        _seed_gpus(seed)


def module_from_source(source: str, name: str, filename: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def to_device(values, device: torch.device) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


NEAR, SHIFTED = "near", "shifted"  # the input sets made from a drawn one (see variants.py)


def make_inputs(task_module: types.ModuleType, seed: int, device: torch.device,
                variant: int | list[int] | None = None, kind: str = NEAR) -> list:
    """The task's inputs drawn with `seed` (the same in every process for the same seed), and,
    with `variant`, the set made from them: their near duplicate, or (kind SHIFTED) their shifted
    set (see `varied_inputs`)."""
    return varied_inputs(task_module, seed, device, variant, kind)[0]


def varied_inputs(task_module: types.ModuleType, seed: int, device: torch.device, variant: int | list[int] | None,
                  kind: str = NEAR) -> tuple[list, int]:
    """The inputs of `seed`, or the set `kind` made from them with `variant`: NEAR takes a few
    values from a second draw (seeded with `variant`) at the same places, SHIFTED moves the
    continuous inputs by x -> a*x + b. A list of variants (NEAR only) makes a chain: the near
    duplicate of the near duplicate of ... Returns the set and how many places (NEAR: the last link
    of the chain) or tensors (SHIFTED) it changed: 0 where it is its predecessor itself."""
    inputs = _draw(task_module, seed, device)
    if variant is None:
        return inputs, 0
    if kind == SHIFTED and isinstance(variant, int):
        return shifted(inputs, variant)
    if kind != NEAR:
        raise ValueError(f"input set kind {kind!r} with variant {variant!r}: expected {NEAR!r} (one variant or a "
                         f"chain of them) or {SHIFTED!r} (one variant)")
    changed = 0
    for link in variant if isinstance(variant, (list, tuple)) else [variant]:
        inputs, changed = near_duplicate(inputs, _draw(task_module, int(link), device), int(link))
    return inputs, changed


def _draw(task_module: types.ModuleType, seed: int, device: torch.device) -> list:
    """`get_inputs()` after `seed`. On a GPU it runs with the GPU as the default device, so its
    random tensors are drawn there (gigabyte inputs in milliseconds instead of seconds on the CPU);
    a task whose `get_inputs` cannot run that way (it needs CPU tensors itself) is drawn on the CPU."""
    inputs = None
    if device.type == "cuda":
        seed_generators(seed, device)
        try:
            with torch.device(device):
                inputs = to_device(list(task_module.get_inputs()), device)
        except Exception:
            pass
    if inputs is None:
        seed_generators(seed, device)
        inputs = to_device(list(task_module.get_inputs()), device)
    return inputs


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
