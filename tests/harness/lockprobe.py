"""Whether a timer could take a device's lock now, asked from outside the lock's own code."""

from __future__ import annotations

import fcntl

from cuda_agent.devices import lock_name
from cuda_agent.home import subdir


def timer_would_wait(device: str = "cpu") -> bool:
    """True when someone holds `device`'s lock (shared or alone): a timer asking now would wait."""
    path = subdir("locks") / f"{lock_name(device)}.lock"
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False
