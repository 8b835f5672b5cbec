"""FLOPs, minimal bytes and speed-of-light times, with exact expected numbers."""

from __future__ import annotations

import pytest

from cuda_agent.bench import roofline
from cuda_agent.bench.peaks import Peaks, device_peaks
from cuda_agent.bench.roofline import count_work, speed_of_light
from cuda_agent.tasks import Task

MATMUL = """import torch
import torch.nn as nn

M, K, N = 1024, 4096, 2048

class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)

def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]

def get_init_inputs():
    return []
"""

ELEMENTWISE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale

def get_inputs():
    return [torch.randn(4096, 1000)]

def get_init_inputs():
    return [2.0]
"""

LINEAR = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(512, 256)

    def forward(self, x):
        return self.fc(x)

def get_inputs():
    return [torch.randn(128, 512)]

def get_init_inputs():
    return []
"""

DATA_DEPENDENT = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        k = int(x.abs().max().item() > -1) + 1   # needs real values: not possible on meta
        return x * k

def get_inputs():
    return [torch.randn(100, 10)]

def get_init_inputs():
    return []
"""

PEAKS = Peaks(device="test", torch="x", matmul_fp32=50e12, matrix_unit=400e12, matmul_bf16=800e12,
              fma_fp32=60e12, bandwidth=3e12)


def task(code: str, name: str = "t") -> Task:
    return Task(name=name, code=code, origin=f"{name}.py", level=1, problem_id=1)


def test_matmul_flops_and_bytes_are_exact():
    w = count_work(task(MATMUL, "mm"))
    assert w.matrix_flops == 2 * 1024 * 4096 * 2048
    assert w.vector_flops == 0
    assert (w.input_bytes, w.output_bytes, w.param_bytes) == (4 * (1024 * 4096 + 4096 * 2048), 4 * 1024 * 2048, 0)
    assert w.method == "meta"


def test_elementwise_bytes_are_inputs_plus_outputs_read_and_written_once():
    w = count_work(task(ELEMENTWISE, "ew"))
    n = 4096 * 1000
    assert w.matrix_flops == 0
    assert w.min_bytes == 4 * n + 4 * n      # the intermediate relu(x) is not a required transfer
    assert w.vector_flops == 2 * n           # relu and the multiply, one FLOP per element each


def test_parameters_count_as_read_once():
    w = count_work(task(LINEAR, "lin"))
    assert w.matrix_flops == 2 * 128 * 512 * 256
    assert w.param_bytes == 4 * (512 * 256 + 256)
    assert w.min_bytes == 4 * (128 * 512 + 128 * 256) + w.param_bytes


def test_speed_of_light_takes_the_binding_limit():
    mm = speed_of_light(count_work(task(MATMUL, "mm")), PEAKS)
    flops = 2 * 1024 * 4096 * 2048
    assert mm.bound == "compute"
    assert mm.sol_ms == pytest.approx(flops / 400e12 * 1e3)
    assert mm.sol_fp32_ms == pytest.approx(flops / 50e12 * 1e3)
    ew = speed_of_light(count_work(task(ELEMENTWISE, "ew")), PEAKS)
    assert ew.bound == "memory"
    assert ew.sol_ms == pytest.approx(8 * 4096 * 1000 / 3e12 * 1e3)
    assert ew.compute_ms == pytest.approx(2 * 4096 * 1000 / 60e12 * 1e3)


def test_task_that_needs_real_values_is_counted_by_a_real_run():
    w = count_work(task(DATA_DEPENDENT, "dd"))
    assert w.method == "real:cpu"
    assert w.input_bytes == w.output_bytes == 4 * 100 * 10


def test_counts_are_cached_per_task_code(monkeypatch):
    t = task(MATMUL, "mm")
    first = count_work(t)

    def boom(*args, **kwargs):
        raise AssertionError("counted again instead of reading the cache")

    monkeypatch.setattr(roofline, "_count_on", boom)
    assert count_work(t) == first


def test_a_broken_task_gives_an_error_not_an_exception():
    broken = task(MATMUL.replace("torch.matmul(A, B)", "undefined_name(A)"), "broken")
    out = roofline.task_roofline(broken, PEAKS)
    assert "error" in out and "broken" in out["error"]


def test_cpu_peaks_are_measured_once_and_cached():
    first = device_peaks("cpu")
    assert first.matmul_fp32 > 0 and first.fma_fp32 > 0 and first.bandwidth > 0
    assert device_peaks("cpu").measured_at == first.measured_at
