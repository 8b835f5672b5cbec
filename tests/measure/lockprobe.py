"""Whether a timer could take a device's lock now, asked from outside the lock's own code."""

from __future__ import annotations

import fcntl
from pathlib import Path

from cuda_agent.devices import lock_name
from cuda_agent.home import locks


def would_wait(path: Path, shared: bool = False) -> bool:
    """True when the lock file `path` is held so that asking for it now (`shared` or alone) would wait."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def timer_would_wait(device: str = "cpu") -> bool:
    """True when someone holds `device`'s lock (shared or alone): a timer asking now would wait."""
    return would_wait(locks() / f"{lock_name(device)}.lock")
