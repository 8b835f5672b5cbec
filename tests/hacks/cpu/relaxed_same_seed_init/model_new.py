import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """The reference's parameters under other names (w, b instead of scale, bias)."""

    def __init__(self, features: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(features))
        self.b = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(torch.addcmul(self.b, x, self.w))
