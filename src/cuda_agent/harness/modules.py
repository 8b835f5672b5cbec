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
    """The task's inputs drawn with `seed` (the same in every process for the same seed).

    On a GPU, `get_inputs` runs with the GPU as the default device, so its random tensors are
    drawn there (gigabyte inputs in milliseconds instead of seconds on the CPU); a task whose
    `get_inputs` cannot run that way (it needs CPU tensors itself) is drawn on the CPU."""
    if device.type == "cuda":
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                return to_device(list(task_module.get_inputs()), device)
        except Exception:
            pass
    torch.manual_seed(seed)
    return to_device(list(task_module.get_inputs()), device)


def make_model(model_cls, task_module: types.ModuleType, seed: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(seed)
    init = list(task_module.get_init_inputs())
    return model_cls(*init).to(device)


def outputs_to_cpu(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [o.detach().to("cpu", copy=True).contiguous() for o in outputs]


def release(device: torch.device) -> None:
    """Hand the GPU memory this process no longer uses back to the device: the reference worker
    and the solution child share one GPU, and a multi-gigabyte task needs it all in turn."""
    if device.type == "cuda":
        _empty_cache()


# Bound at import, before a solution's code runs in the child (which could replace them).
_to, _empty_cache = torch.Tensor.to, torch.cuda.empty_cache
HOST_COPY_BYTES = 256 << 20


def snapshot_inputs(inputs: list, clone) -> list:
    """Copies of the tensor inputs (to check later that forward left them unchanged): on the
    device, or on the host for a large one, so the check does not double a big task's GPU memory."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x = _to(x, "cpu", copy=True) if x.is_cuda and x.numel() * x.element_size() > HOST_COPY_BYTES else clone(x)
        out.append(x)
    return out
