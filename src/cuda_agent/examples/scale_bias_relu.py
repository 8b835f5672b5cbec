import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x * scale + bias) with a per-feature scale and bias.

    Eager PyTorch runs three element-wise kernels and writes two intermediates; one fused kernel
    reads x once and writes y once.
    """

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + self.bias)


batch = 4096
features = 2048


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
