import os
import socket
import sys

import torch
import torch.nn as nn

# A CUDA context that no process of the solution holds: a daemon (a new interpreter) makes a context,
# queues about 90 s of spin kernels, sends every descriptor of /dev/nvidia* it has into a socket whose
# both ends this process keeps and never reads, and exits. The context lives on with the descriptors in
# the socket's queue, and the GPU time-slices its work with the baselines' windows. No process of the
# solution's user has /dev/nvidia* open or mapped but the child, which may; the daemon's pid is gone.
PARKER = r"""
import array, os, socket, sys, torch
torch.cuda._sleep(1000)
torch.cuda.synchronize()
for _ in range(900):
    torch.cuda._sleep(200_000_000)   # about 0.1 s each
fds = []
for fd in os.listdir("/proc/self/fd"):
    try:
        if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
            fds.append(int(fd))
    except FileNotFoundError:
        pass
s = socket.socket(fileno=int(sys.argv[1]))
s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
os._exit(0)
"""

_kept, _end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
_end.set_inheritable(True)
_pid = os.fork()
if _pid == 0:   # a new interpreter: a forked one could not initialise CUDA
    os.closerange(3, _end.fileno())
    os.closerange(_end.fileno() + 1, 1 << 12)
    try:
        os.execv(sys.executable, [sys.executable, "-c", PARKER, str(_end.fileno())])
    finally:
        os._exit(1)
os.waitpid(_pid, 0)   # the work queued and parked: its process is gone
_end.close()


class ModelNew(nn.Module):
    """Correct (eager's own computation), with a context of another, exited process parked in its socket."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)
