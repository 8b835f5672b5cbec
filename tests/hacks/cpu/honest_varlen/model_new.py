import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row sums over however many rows x has."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.rowsum_forward(x)
