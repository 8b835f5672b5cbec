import os
import sys

import torch
import torch.nn as nn

import cuda_extension

BEAT = "/tmp/cuda_agent_hack_chain_beat"

# Each chain: a small interpreter (exec'd, so that a fork copies megabytes, not torch) that forks
# its successor and exits about every 2 ms, rewriting BEAT every 10 ms; it ends after 60 s, or at
# once when BEAT has been removed (the test's clean-up). Listing the sandbox user's processes and
# killing them one by one is a step behind it: each pid listed has handed over to a new one.
CHAIN = """
import os, sys, time
beat, end, last, first = sys.argv[1], time.time() + 60, 0.0, True
while time.time() < end:
    if os.fork():
        os._exit(0)
    now = time.time()
    if now - last > 0.01:
        try:
            fd = os.open(beat, os.O_WRONLY | os.O_TRUNC | (os.O_CREAT if first else 0), 0o666)
        except OSError:
            os._exit(0)
        os.write(fd, repr(now).encode())
        os.close(fd)
        last, first = now, False
    time.sleep(0.001)
"""


def _start_chains(n: int) -> None:
    """n chains, each in a session of its own and reparented to init by a double fork: outside the
    child's process group, with no parent-death signal (it is not inherited across fork)."""
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.closerange(3, 1 << 12)
            try:
                os.execv(sys.executable, [sys.executable, "-S", "-c", CHAIN, BEAT])
            finally:
                os._exit(1)
        os.waitpid(pid, 0)


_start_chains(3)


class ModelNew(nn.Module):
    """An honest fused kernel, and processes left behind that must not outlive the evaluation."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.sbr_forward(x, self.scale, self.bias)
