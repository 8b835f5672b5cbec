"""Stopping the other sandboxed processes that hold the timed GPU while an evaluation times.

The device lock keeps other evaluations' runs and compiles off a GPU while one is timed, but not the
processes they left: a solution child waits between its stages without any hold, and a daemon or
thread of it may keep queuing kernels; an agent's shell command may run its own tests on the GPU. On a
fresh H200 (2026-11-28, the hack corpus under `-n 8`) one case's daemon kept a 1 GB multiply looping on
the GPU while other tests timed their honest solutions beside it. So before each block of a timed run,
every process of a numbered sandbox user (solution children and agents' shells, `cuda-agent-eval-N` and
`cuda-agent-tool-N`) that the driver lists with a context on the timed GPU is stopped, the timed
solution's own user excepted (its freezer stops it around the baselines' windows), and all are continued
when the run ends (but those of a user that a freezer holds stopped: stop_holds.py). A stop may be undone meanwhile (a process of the same user without a context sends
SIGCONT; another GPU's freezer continues the whole user), so each block stops every held process again
and says whether one still ran.

None of them is asked for anything meanwhile: an evaluation talks to its child only while it holds the
device lock (harness/evaluation.py), so a stop delays it and breaks nothing. An agent's shell command
pauses, its time limit running on. Work queued before a stop still drains; the timer's wait for the GPU
alone (measure/alone.py) covers that.

Only processes with a context on this GPU: another GPU's timer freezes its own solution's user around its
baselines, and a continue from here would wake that solution in the middle of such a block. The shared
fallback user (`cuda-agent-eval`, where the numbered ones ran out) spans every GPU's evaluations and is
never stopped: its evaluations are flagged `shared_sandbox_user`. Each process is named by a pidfd, opened
and then checked to be the user's the driver's look said it was, so a pid reused since is never signalled.
Not root: sandboxed processes run as the caller, nothing is stopped.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import suppress
from typing import Iterable

from cuda_agent.sandbox.gpu_contexts import user
from cuda_agent.sandbox.isolation import EVAL_USER, TOOL_USER, eval_uids
from cuda_agent.sandbox.stop_holds import unless_held
from cuda_agent.sandbox.user_signals import STOPPED, listing

STOP_PATIENCE_S = 0.5   # how long a stop may take (a process inside the kernel stops on its way out)


class Bystanders:
    """The other sandbox users' processes stopped for one timed run: `stop(holders)`, before each block, stops
    those of the GPU's holders not held yet and every held one again; `close()` continues them all."""

    def __init__(self, spare: Iterable[int]) -> None:
        self._spare = set(spare)
        self._others: set[int] | None = None   # the users it may stop: read from the user table at the first stop
        self._held: dict[int, tuple[int, int]] = {}   # pid -> (its pidfd, its uid)

    def __enter__(self) -> Bystanders:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return sorted(self._held)

    def stop(self, holders: dict[int, int | None]) -> int:
        """Stop the processes of `holders` (pid -> uid: gpu_contexts.Look.live) that are another sandbox user's,
        and again every one held; how many still ran once STOP_PATIENCE_S had passed."""
        if self._others is None:
            self._others = set(eval_uids((EVAL_USER, TOOL_USER))) - self._spare if os.geteuid() == 0 else set()
        for pid, uid in holders.items():
            if uid in self._others and pid not in self._held:
                try:
                    fd = os.pidfd_open(pid)
                except OSError:   # it ended meanwhile
                    continue
                if user(pid) != uid:   # its pid reused since the look: not a bystander's
                    os.close(fd)
                    continue
                self._held[pid] = (fd, uid)
        deadline, pause = time.monotonic() + STOP_PATIENCE_S, 0.0002
        running = list(self._held)
        while running:
            for pid in running:
                with suppress(OSError):
                    signal.pidfd_send_signal(self._held[pid][0], signal.SIGSTOP)
            if time.monotonic() > deadline:
                break
            time.sleep(pause)   # a stop takes microseconds where the process is not inside the kernel
            pause = min(2 * pause, 0.005)
            running = self._running(running)
        return len(running)

    def close(self) -> None:
        """Every held process continued, but those of a user that a freezer holds stopped (another evaluation's
        solution, stopped for its reference's compile): that freezer's own continue wakes them (stop_holds.py)."""
        try:
            for uid in sorted({uid for _, uid in self._held.values()}):
                with unless_held(uid) as free:
                    if free:
                        for fd, owner in self._held.values():
                            if owner == uid:
                                with suppress(OSError):
                                    signal.pidfd_send_signal(fd, signal.SIGCONT)
        finally:
            for fd, _ in self._held.values():
                os.close(fd)
            self._held.clear()

    def _running(self, pids: list[int]) -> list[int]:
        """Those of `pids` with a thread that runs: not stopped, not dead."""
        out = []
        for uid in {self._held[pid][1] for pid in pids}:
            seen = listing(uid, [pid for pid in pids if self._held[pid][1] == uid])
            out += [pid for pid, s in seen.items() if any(state not in STOPPED for state in s.states)]
        return sorted(out)
