import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Allocates 1 TiB of device memory."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        hog = torch.empty(2**38, dtype=torch.float32, device=x.device)
        return cuda_extension.sbr_out(x, self.scale, self.bias, hog.narrow(0, 0, x.numel()).view(x.shape))
