"""Which sandbox users a freezer holds stopped, host-wide, so that another evaluation's bystander stop never
continues what a freezer stopped.

Two stops meet on one user: evaluation B's freezer stops its solution's user while B's reference compiles
(harness/profiling.py), and evaluation A, timing meanwhile on the same GPU, stops every other sandbox user's
process with a context there (bystanders.py) and continues them when its run ends. A's continue used to wake B's
child in the middle of B's compile, whose autotuning (which stops no one) a woken child could slow, so that the
torch.compile baseline it is compared with kept a slower kernel (2026-11-29 review; more likely since the compile
lets go of the device lock while it works on the CPU).

A freezer holds its users' files shared (flock) from before its stop to after its continue. A bystander stop
continues a user's processes only with that user's file held alone, taken within CONTINUE_WAIT_S (another
bystander's momentary hold passes; a freezer's lasts its whole block): where it cannot be had, the processes
stay stopped and the freezer's own continue, which reaches every process of the user, wakes them. Held alone
while the signals go out, so no freezer's stop begins between the look and the continue. Files in the device
locks' folder (home.locks: the harness user's alone), one a user; a holder that dies lets go with its descriptors.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from typing import Iterator

from cuda_agent.home import flock_within, locks

CONTINUE_WAIT_S = 0.05   # how long a bystander's continue tries for the user's file alone


def _path(uid: int) -> str:
    folder = locks() / "stopped"
    folder.mkdir(mode=0o700, exist_ok=True)
    return str(folder / f"{uid}.lock")


@contextmanager
def held_stopped(uids: list[int]) -> Iterator[None]:
    """The block marks `uids` held stopped by this process (their files held shared; taken in order, so two
    freezers never wait for each other)."""
    fds: list[int] = []
    try:
        for uid in sorted(set(uids)):
            fd = os.open(_path(uid), os.O_RDWR | os.O_CREAT, 0o600)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_SH)   # waits only for a bystander's continue, which holds it microseconds
        yield
    finally:
        for fd in fds:
            os.close(fd)   # the hold goes with the descriptor


@contextmanager
def unless_held(uid: int) -> Iterator[bool]:
    """Yields whether no freezer holds `uid` stopped; when none does, the user's file is held alone through the
    block (the continue sent inside it), so that no freezer's stop begins meanwhile."""
    fd = os.open(_path(uid), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield flock_within(fd, CONTINUE_WAIT_S, pause=0.0005, max_pause=0.01)
    finally:
        os.close(fd)
