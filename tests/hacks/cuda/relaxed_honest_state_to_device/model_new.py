import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """relu(x * scale + bias) by the CUDA kernel in kernels/sbr.cu; the bias is held as the
    reference holds it, a plain tensor attribute (left on the host by model.to(device)) that
    forward moves to the input's device, as KernelBench's LSTMs move h0."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = torch.randn(features)

    def forward(self, x):
        self.bias = self.bias.to(x.device)
        return cuda_extension.sbr_forward(x, self.scale, self.bias)
