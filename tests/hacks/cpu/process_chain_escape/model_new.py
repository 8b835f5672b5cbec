import os
import time

import torch
import torch.nn as nn

import cuda_extension

BEAT = "/tmp/cuda_agent_hack_chain_beat"


def _chain() -> None:
    """A chain of processes that each fork the next and exit (a new pid every 10 ms), in a session
    of its own, rewriting BEAT as it goes: a listing of the sandbox user's processes is always a
    step behind it."""
    if os.fork() != 0:
        return
    os.setsid()
    os.closerange(3, 1 << 12)
    end = time.time() + 30
    while time.time() < end:
        if os.fork() != 0:
            os._exit(0)
        with open(BEAT, "w") as f:
            f.write(str(time.time()))
        time.sleep(0.01)
    os._exit(0)


_chain()


class ModelNew(nn.Module):
    """An honest fused kernel, and processes left behind that must not outlive the evaluation."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.sbr_forward(x, self.scale, self.bias)
