import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The GEMM with the @ operator."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return x @ self.linear.weight.t() + self.linear.bias
