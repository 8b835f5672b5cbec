import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x @ W^T + b (nn.Linear): a GEMM whose reduction is long enough (K = 1024) that
    accumulating in bfloat16 is far outside the tolerance, while float32 accumulation is not."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


batch = 32
in_features = 1024
out_features = 256


def get_inputs():
    return [torch.randn(batch, in_features) * 4]


def get_init_inputs():
    return [in_features, out_features]
