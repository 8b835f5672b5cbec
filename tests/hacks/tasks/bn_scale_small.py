import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(batchnorm(x) * scale): a BatchNorm1d in training mode (KernelBench's models run as
    constructed: batch statistics), then a random per-feature scale, so that the weights
    ModelNew gets matter."""

    def __init__(self, features: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)
        self.scale = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(x) * self.scale)


batch = 256
features = 1024


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
