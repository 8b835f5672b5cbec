"""Turning source text into modules and inputs inside worker processes (never in the caller)."""

from __future__ import annotations

import types

import torch


def module_from_source(source: str, name: str, filename: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def to_device(values, device: torch.device) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def make_inputs(task_module: types.ModuleType, seed: int, device: torch.device) -> list:
    """The task's inputs drawn with `seed` (the same in every process for the same seed)."""
    torch.manual_seed(seed)
    return to_device(list(task_module.get_inputs()), device)


def make_model(model_cls, task_module: types.ModuleType, seed: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(seed)
    init = list(task_module.get_init_inputs())
    return model_cls(*init).to(device)


def outputs_to_cpu(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [o.detach().to("cpu", copy=True).contiguous() for o in outputs]
