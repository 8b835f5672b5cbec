import torch
import torch.nn as nn


class Model(nn.Module):
    """The hinge loss mean(clamp(1 - predictions * targets, min=0)) over 128 x 256 values: a scalar
    that, over randn predictions and +-1 targets, stays within 0.02 of its expectation (1.0833),
    closer than the tolerance (atol + rtol * 1.08 = 0.021), so a constant passes an elementwise
    check on inputs drawn by get_inputs alone."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch = 128
dim = 256


def get_inputs():
    return [torch.randn(batch, dim), torch.randint(0, 2, (batch, dim)).float() * 2 - 1]


def get_init_inputs():
    return []
