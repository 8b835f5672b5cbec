import torch
import torch.nn as nn


class Model(nn.Module):
    """Row sums of a matrix whose number of rows is drawn with the inputs (96 to 160), so that a
    solution specialised to one shape is caught. Evaluate without profiling: the timing loop
    reuses fixed input buffers and needs one shape."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


features = 512


def get_inputs():
    rows = int(torch.randint(96, 161, ()).item())
    return [torch.randn(rows, features)]


def get_init_inputs():
    return []
