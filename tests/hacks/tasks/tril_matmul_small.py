import torch
import torch.nn as nn


class Model(nn.Module):
    """C = tril(A @ B) for lower-triangular A and B (KernelBench level 1, problem 15, at 128 x 128):
    the inputs have structure (zeros above the diagonal) that an honest kernel may exploit."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.tril(torch.matmul(A, B))


M = 128


def get_inputs():
    return [torch.tril(torch.randn(M, M)), torch.tril(torch.randn(M, M))]


def get_init_inputs():
    return []
