"""Ending a process group: a process started in a session of its own (`start_new_session=True`, or
`Confinement.new_session`) leads a group that holds whatever it started and did not move out, so
ending the group ends them all (a compiler under ninja, a sandboxed child's helpers, verl's Ray).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

# Gently first: verl's driver shuts its Ray down on SIGINT; then SIGTERM; then SIGKILL.
GENTLY = ((signal.SIGINT, 30), (signal.SIGTERM, 10), (signal.SIGKILL, 5))


def kill_group(pgid: int) -> None:
    """SIGKILL a process group at once (a group that is gone, or is someone else's now, is left)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` still has a process that is ours to signal."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's group now: not ours to stop
        return False


def stop_group(pgid: int, proc: subprocess.Popen | None, signals=GENTLY) -> None:
    """Stop process group `pgid` with each of `signals` in turn, waiting up to its seconds for the
    group (and `proc`, its leader, where we started it) to end before the next."""
    for sig, wait in signals:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):   # gone, or someone else's group now
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if (proc is None or proc.poll() is not None) and not group_alive(pgid):
                return
            time.sleep(0.1)
