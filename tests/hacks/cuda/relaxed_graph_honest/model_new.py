import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """A CUDA graph of the reference's three kernels, as released KernelBench solutions write it:
    captured on the first call, each call copies its input into the graph's static input, replays
    and returns a copy of the static output."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))
        self.graph = None
        self.static_x = None
        self.static_y = None

    def _capture(self, x):
        self.static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.relu(self.static_x * self.scale + self.bias)   # warm-up off the capture
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_y = torch.relu(self.static_x * self.scale + self.bias)

    def forward(self, x):
        if self.graph is None or x.shape != self.static_x.shape:
            self._capture(x)
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_y.clone()
