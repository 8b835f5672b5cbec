import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The hinge loss in one pass over the inputs (kernels/hinge.cpp)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return cuda_extension.hinge_loss(predictions, targets)
