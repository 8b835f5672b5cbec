import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The fused kernel, its parameters named w and b (the reference: scale and bias)."""

    def __init__(self, features: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(features))
        self.b = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.sbr_forward(x, self.w, self.b)
