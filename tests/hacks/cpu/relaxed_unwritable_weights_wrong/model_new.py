import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The reference's names and shapes, but one scale broadcast over every feature (an expanded
    view, which load_state_dict cannot write into): a mistake, not a trick."""

    def __init__(self, features: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)
        self.scale = nn.Parameter(torch.randn(1).expand(features))

    def forward(self, x):
        mean = x.mean(0)
        var = x.var(0, unbiased=False)
        a = self.scale * self.bn.weight * torch.rsqrt(var + self.bn.eps)
        b = self.scale * self.bn.bias - mean * a
        return cuda_extension.sbr_forward(x, a.contiguous(), b.contiguous())
