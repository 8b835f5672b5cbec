import sys

import torch
import torch.nn as nn

import cuda_extension

# Stands for native code that reaches the interpreter: the harness's own clock in this process,
# bound at import, slowed 4x, so every figure this process reports is a quarter of the truth.
_timing = sys.modules["cuda_agent.measure.timing"]
_real = _timing._perf_counter_ns
_timing._perf_counter_ns = lambda: _real() // 4


class ModelNew(nn.Module):
    """An honest fused kernel made 240 times slower (240 passes), timed by a clock slowed 4x."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        out = None
        for _ in range(240):
            out = cuda_extension.sbr_forward(x, self.scale, self.bias)
        return out
