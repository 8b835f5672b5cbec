"""Turning source text into modules and inputs inside worker processes (never in the caller)."""

from __future__ import annotations

import math
import os
import types

import torch

# Bound at import, before a solution's code runs in the child (which could replace them).
_from_file, _reshape, _to, _empty_cache = torch.from_file, torch.Tensor.reshape, torch.Tensor.to, torch.cuda.empty_cache


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


# Outputs travel from the solution child to the reference worker as raw bytes in files of the
# exchange folder (tmpfs): one device-to-host copy in the child, one host-to-device copy per chunk
# in the reference worker, and nothing to unpickle from an untrusted process.
MAX_OUTPUTS = 64
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}


def write_outputs(outputs: list[torch.Tensor], prefix: str) -> list[dict]:
    """Each output's bytes to `prefix`.N; returns their dtypes and shapes (the only metadata)."""
    meta = []
    for i, t in enumerate(outputs):
        t = t.detach()
        t = t if t.is_contiguous() else t.contiguous()
        nbytes = t.numel() * t.element_size()
        if nbytes:
            dst = _from_file(f"{prefix}.{i}", shared=True, size=nbytes, dtype=torch.uint8)
            dst.copy_(_reshape(t, -1).view(torch.uint8))
            del dst
        else:  # an empty mapping creates no file
            os.close(os.open(f"{prefix}.{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644))
        meta.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)})
    return meta


def read_outputs(prefix: str, meta) -> list[torch.Tensor] | str:
    """The outputs that write_outputs left at `prefix` (host memory, mapped from the files), or why
    they cannot be read; `meta` comes from the untrusted child and is checked against the files."""
    if not isinstance(meta, list) or len(meta) > MAX_OUTPUTS:
        return "no readable list of outputs"
    out = []
    for i, m in enumerate(meta):
        dtype = DTYPES.get(m.get("dtype")) if isinstance(m, dict) else None
        shape = m.get("shape") if isinstance(m, dict) else None
        if dtype is None or not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            return f"output {i} has no valid dtype and shape"
        path = f"{prefix}.{i}"
        numel = math.prod(shape)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        try:
            size = os.path.getsize(path)
        except OSError:
            return f"output {i} is missing"
        if size != nbytes:
            return f"output {i} has {size} bytes, its shape and dtype need {nbytes}"
        raw = torch.from_file(path, shared=False, size=nbytes, dtype=torch.uint8) if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        out.append(raw.view(dtype).reshape(shape))
    return out


def remove_outputs(prefix: str, count: int) -> None:
    for i in range(count):
        try:
            os.unlink(f"{prefix}.{i}")
        except OSError:
            pass


def release(device: torch.device) -> None:
    """Hand the GPU memory this process no longer uses back to the device: the reference worker
    and the solution child share one GPU, and a multi-gigabyte task needs it all in turn."""
    if device.type == "cuda":
        _empty_cache()


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
