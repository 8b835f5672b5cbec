import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x * scale + bias) with a per-feature scale and bias: the bundled scale_bias_relu
    task at a size that keeps CPU evaluations of the hack corpus fast."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + self.bias)


batch = 256
features = 1024


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
