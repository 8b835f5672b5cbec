import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The affine part in the kernel, the relu by torch."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(cuda_extension.sb_forward(x, self.scale, self.bias))
