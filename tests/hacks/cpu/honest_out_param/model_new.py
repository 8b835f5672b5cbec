import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Allocates the output in Python and has the kernel write into it."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        out = torch.empty_like(x)
        cuda_extension.sbr_out(x, self.scale, self.bias, out)
        return out
