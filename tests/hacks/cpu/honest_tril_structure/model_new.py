import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """tril(A @ B) from the lower triangles alone (kernels/tril.cpp): right for every input of the
    task, whose A and B are lower-triangular, and wrong for matrices that are not."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return cuda_extension.tril_matmul(A, B)
