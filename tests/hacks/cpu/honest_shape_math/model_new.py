import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Shape arithmetic, views and an explicit allocation around the kernel."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        B, N = x.shape
        flat = x.reshape(B * N // N, N).contiguous()
        out = torch.empty(B, N, dtype=x.dtype, device=x.device)
        cuda_extension.sbr_out(flat, self.scale.view(-1), self.bias.view(-1), out.view(B, N))
        return out.view(B, N)
