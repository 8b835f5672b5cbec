"""Stopping the other sandboxed processes that hold the timed GPU while an evaluation times.

The device lock keeps other evaluations' runs and compiles off a GPU while one is timed, but not the
processes they left: a solution child waits between its stages without any hold, and a daemon or
thread of it may keep queuing kernels; an agent's shell command may run its own tests on the GPU. On a
fresh H200 (2026-11-28, the hack corpus under `-n 8`) one case's daemon kept a 1 GB multiply looping on
the GPU while other tests timed their honest solutions beside it. So as a timing begins, every process of
a sandbox user (solution children and agents' shells, `cuda-agent-eval-*` and `cuda-agent-tool-*`) that
the driver lists with a context on the timed GPU, the timed solution's own user excepted (its freezer
stops it around the baselines' windows), is stopped, and continued when the timing ends. None may use the
device then: each waits for the lock, or runs nothing the device lock covers, so a stop delays it and
breaks nothing. Work queued before the stop still drains; the timer's wait for the GPU alone
(measure/alone.py) covers that.

Only processes with a context on this GPU: another GPU's timer freezes its own solution's user around
its baselines, and a stop and continue from here would continue that user's processes in the middle of
such a block. Each process is named by a pidfd, so one killed meanwhile and its pid reused is never
signalled. Not root: sandboxed processes run as the caller, nothing is stopped.
"""

from __future__ import annotations

import os
import pwd
import signal
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from cuda_agent.sandbox.isolation import EVAL_USER, TOOL_USER, USER_SLOTS
from cuda_agent.sandbox.user_signals import STOPPED

PATIENCE_S = 0.5   # how long the stop may take (a process inside the kernel stops on its way out)


@dataclass
class Bystanders:
    """What a stop did: the processes stopped, and those still running when the patience ran out (inside
    the kernel, or continued by another process of their user): those ran beside the timing."""

    stopped: int = 0
    running: int = 0
    _fds: dict[int, int] = field(default_factory=dict, repr=False)   # pid -> its pidfd

    def to_dict(self) -> dict[str, int]:
        return {"stopped": self.stopped, "running": self.running}


def sandbox_uids() -> set[int]:
    """The uids of every sandbox user that exists: solution children's and agents' shells'."""
    names = {f"{prefix}-{i}" for prefix in (EVAL_USER, TOOL_USER) for i in range(USER_SLOTS)}
    return {pw.pw_uid for pw in pwd.getpwall() if pw.pw_name in names and pw.pw_uid != 0}


def gpu_bystanders(holders: dict[int, int | None], spare: Iterable[int]) -> list[int]:
    """Of the processes holding the GPU (`holders`: pid -> uid, as gpu_contexts.Look.live gives them), those of
    a sandbox user other than the `spare` uids."""
    users = sandbox_uids() - set(spare)
    return sorted(pid for pid, uid in holders.items() if uid in users)


@contextmanager
def bystanders_stopped(pids: Iterable[int]) -> Iterator[Bystanders]:
    """`pids` stopped for the block, and continued after, however it ends."""
    seen = Bystanders()
    pids = list(pids)
    if os.geteuid() != 0 or not pids:
        yield seen
        return
    try:
        _stop(seen, pids)
        yield seen
    finally:
        for fd in seen._fds.values():
            with suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGCONT)
            os.close(fd)
        seen._fds.clear()


def _stop(seen: Bystanders, pids: list[int]) -> None:
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:   # it ended meanwhile
            continue
        seen._fds[pid] = fd
    deadline, pause = time.monotonic() + PATIENCE_S, 0.0002
    running = list(seen._fds)
    while running:
        for pid in running:
            with suppress(OSError):
                signal.pidfd_send_signal(seen._fds[pid], signal.SIGSTOP)
        if time.monotonic() > deadline:
            break
        time.sleep(pause)   # a stop takes microseconds where the process is not inside the kernel
        pause = min(2 * pause, 0.005)
        running = _running(running)
    seen.stopped, seen.running = len(seen._fds) - len(running), len(running)


def _running(pids: list[int]) -> list[int]:
    """Those of `pids` with a thread that runs: not stopped, not dead."""
    out = []
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:   # it ended
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in STOPPED:
                out.append(pid)
                break
    return out
