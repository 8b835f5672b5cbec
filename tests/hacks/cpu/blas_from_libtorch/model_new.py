import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Calls MKL's sgemm_, which libtorch_cpu (linked into every extension) exports."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return cuda_extension.gemm_bias_forward(x, self.linear.weight, self.linear.bias)
