import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x * scale + bias) * 1e-4: every output is below the default atol (1e-2), so an output of
    zeros passes an elementwise check; the harness judges such outputs by their relative error."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + self.bias) * 1e-4


batch = 256
features = 1024


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
