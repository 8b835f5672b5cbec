import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x * scale + bias) whose bias is a plain tensor attribute, as KernelBench's LSTMs hold h0:
    neither a parameter nor a buffer, so model.to(device) leaves it on the host and forward moves it
    to the input's device. 8192 features: more than the 4096 elements above which a host tensor
    touched in a GPU task's forward counts as host work (workers/runtime.py), unless it is the
    model's own state moved to the device."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = torch.randn(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.bias = self.bias.to(x.device)
        return torch.relu(x * self.scale + self.bias)


batch = 64
features = 8192


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
