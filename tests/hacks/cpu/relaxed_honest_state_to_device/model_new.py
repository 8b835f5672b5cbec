import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """relu(x * scale + bias) by the fused kernel (kernels/sbr.cpp); the bias is held as the
    reference holds it, a plain tensor attribute that forward moves to the input's device."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = torch.randn(features)

    def forward(self, x):
        self.bias = self.bias.to(x.device)
        return cuda_extension.sbr_forward(x, self.scale, self.bias)
