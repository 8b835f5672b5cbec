import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The whole computation with C++ operators on tensors and an ADL-found relu."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.sbr_attack(x, self.scale, self.bias)
