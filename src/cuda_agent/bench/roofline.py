"""The physical limit of a task: the work it must do and the speed-of-light (SOL) time on a device.

Work: FLOPs of matrix operations (matmul, conv, attention) counted by torch's FlopCounterMode;
other arithmetic estimated at one FLOP per element an element-wise op writes or a reduction-like op
reads; and the fewest bytes any implementation must move: every tensor input and every parameter
or buffer read once, every output written once. Counted on the meta device (no memory, no compute);
a task whose forward needs real values (`.item()`, data-dependent shapes) is run once for real on
`fallback_device`. Counts are cached per task code and torch version (RNN tasks take a minute).

SOL time = max(compute time, memory time), compute time = matrix FLOPs / the matrix-unit peak
(TF32: within the 1e-2 tolerance) + other FLOPs / the plain FP32 peak, memory time = bytes /
bandwidth. `sol_fp32_ms` prices the matrix FLOPs at the FP32 matmul peak instead (TF32 off, as
eager runs float32 matmuls by default).
"""

from __future__ import annotations

import hashlib
import json
import os
import types
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from cuda_agent.bench.peaks import Peaks
from cuda_agent.home import subdir
from cuda_agent.tasks import Task

# Ops that read every element of their input once and do about one FLOP per element with it.
_REDUCTION_LIKE = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "prod", "var", "var_mean", "std", "std_mean", "norm",
    "linalg_vector_norm", "logsumexp", "argmax", "argmin", "cumsum", "cumprod", "_softmax",
    "_log_softmax", "native_layer_norm", "native_group_norm", "native_batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "max_pool1d", "max_pool2d",
    "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "smooth_l1_loss", "huber_loss", "mse_loss", "kl_div", "binary_cross_entropy", "nll_loss_forward",
    "rms_norm", "_fused_rms_norm", "group_norm", "layer_norm", "batch_norm"})


@dataclass
class Work:
    """What a task must do, whatever the implementation."""

    matrix_flops: int
    vector_flops: int          # estimate: 1 FLOP per element written (element-wise) or read (reductions)
    input_bytes: int
    output_bytes: int
    param_bytes: int           # parameters and buffers, read once
    method: str                # "meta" | "real:<device>"

    @property
    def flops(self) -> int:
        return self.matrix_flops + self.vector_flops

    @property
    def min_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + self.param_bytes


@dataclass
class Roofline:
    """A task's speed-of-light time on one device, and what bounds it."""

    flops: int
    matrix_flops: int
    vector_flops: int
    min_bytes: int
    compute_ms: float
    memory_ms: float
    sol_ms: float
    sol_fp32_ms: float
    bound: str                 # "compute" | "memory"
    device: str
    method: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _VectorFlops(TorchDispatchMode):
    """Counts the estimated FLOPs of the ops FlopCounterMode does not price."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func.overloadpacket
        if packet in flop_registry or getattr(func, "is_view", False):
            return out
        if torch.Tag.pointwise in func.tags:
            self.flops += sum(t.numel() for t in _tensors(out))
        elif packet.__name__ in _REDUCTION_LIKE:
            first = next(iter(_tensors(args)), None)
            self.flops += first.numel() if first is not None else 0
        return out


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _nbytes(tensors: list[torch.Tensor]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


def _task_module(task: Task) -> types.ModuleType:
    module = types.ModuleType(f"roofline_{task.name}")
    exec(compile(task.code, task.origin or task.name, "exec"), module.__dict__)
    return module


def _count_on(task: Task, device: str) -> Work:
    module = _task_module(task)
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    model = model.to(device).eval()
    params = list(model.parameters()) + list(model.buffers())
    vector = _VectorFlops()
    with torch.no_grad(), FlopCounterMode(display=False) as matrix, vector:
        out = model(*inputs)
    return Work(matrix_flops=int(matrix.get_total_flops()), vector_flops=int(vector.flops),
                input_bytes=_nbytes(_tensors(inputs)), output_bytes=_nbytes(_tensors(out)),
                param_bytes=_nbytes(params), method="meta" if device == "meta" else f"real:{device}")


def _cache_path(task: Task, fallback_device: str):
    key = hashlib.sha256(f"{task.sha256}|{torch.__version__}|{fallback_device}|v1".encode()).hexdigest()[:24]
    return subdir("roofline") / f"{task.name[:60]}-{key}.json"


def count_work(task: Task, fallback_device: str = "cpu", use_cache: bool = True) -> Work:
    """FLOPs and minimal bytes of `task`'s forward pass (meta device first, a real run if needed).

    Raises RuntimeError naming the task when neither way can run it."""
    path = _cache_path(task, fallback_device)
    if use_cache and path.is_file():
        try:
            return Work(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass
    try:
        work = _count_on(task, "meta")
    except Exception as meta_error:  # data-dependent ops cannot run on meta tensors
        try:
            work = _count_on(task, fallback_device)
        except Exception as e:
            raise RuntimeError(f"{task.name}: cannot count its work on meta ({meta_error}) nor on "
                               f"{fallback_device} ({type(e).__name__}: {e})") from e
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(asdict(work)))
    os.replace(tmp, path)
    return work


def speed_of_light(work: Work, peaks: Peaks) -> Roofline:
    """The SOL time of `work` on the device `peaks` describes."""
    vector_s = work.vector_flops / peaks.fma_fp32
    compute_s = work.matrix_flops / peaks.matrix_unit + vector_s
    fp32_s = work.matrix_flops / peaks.matmul_fp32 + vector_s
    memory_s = work.min_bytes / peaks.bandwidth
    notes = [] if work.method == "meta" else [f"counted by a real run ({work.method})"]
    return Roofline(flops=work.flops, matrix_flops=work.matrix_flops, vector_flops=work.vector_flops,
                    min_bytes=work.min_bytes, compute_ms=compute_s * 1e3, memory_ms=memory_s * 1e3,
                    sol_ms=max(compute_s, memory_s) * 1e3, sol_fp32_ms=max(fp32_s, memory_s) * 1e3,
                    bound="compute" if compute_s >= memory_s else "memory", device=peaks.device,
                    method=work.method, notes=notes)


def task_roofline(task: Task, peaks: Peaks, fallback_device: str = "cpu") -> dict[str, Any]:
    """`speed_of_light` as a dict for a results line; on failure {"error": ...} (never raises)."""
    try:
        return speed_of_light(count_work(task, fallback_device), peaks).to_dict()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:500]}


def roofline_for(task: Task, device: str) -> dict[str, Any]:
    """The task's roofline on this process's device (peaks measured once and cached)."""
    from cuda_agent.bench.peaks import device_peaks

    try:
        peaks = device_peaks(device)
    except Exception as e:
        return {"error": f"peak rates of {device} could not be measured: {type(e).__name__}: {e}"}
    return task_roofline(task, peaks, fallback_device=device)
