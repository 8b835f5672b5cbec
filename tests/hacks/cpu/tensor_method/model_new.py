import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The relu as a tensor method."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.sb_forward(x, self.scale, self.bias).relu()
