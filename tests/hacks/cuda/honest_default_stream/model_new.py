import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """relu(x * scale + bias) by the CUDA kernel in kernels/sbr.cu."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.sbr_forward(x, self.scale, self.bias)
