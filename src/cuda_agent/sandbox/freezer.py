"""Stopping every process of the solution's sandbox user while its baselines are timed.

A paired run times the baselines' windows of each round (about 20 a run) with every process of the
solution's user stopped (SIGSTOP), so that nothing it left running slows them and lifts its speed-up.
A process may continue itself, though (kernel timers that send it SIGCONT, re-armed while it runs:
2026-11-28 review), or continue another late in the stopping pass. So each block says, once it has
ended, whether it was quiet: whether the user's processes ran (their threads' run time, from a listing
before the block and one after it, before they are continued) and whether any came or went. A block
that was not quiet fails the evaluation (harness/profiling.py).

A stop reaches a process's threads, not the GPU work it queued: kernels a process of the user other than
the solution's child launched before the stop run on through the baselines' windows (a daemon with a
CUDA context of its own). So a block in which such a process holds the GPU (a descriptor or a mapping of
/dev/nvidia*) is not quiet either, nor one at whose end the driver lists a context whose process is gone
(its descriptors passed on: gpu_contexts.py). Work the child itself queued is not seen here.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Iterable, Iterator

from cuda_agent.sandbox.gpu_contexts import ContextWatch
from cuda_agent.sandbox.stop_holds import held_stopped
from cuda_agent.sandbox.user_signals import PATIENCE_S, STOPPED, Helper, Seen, Thread, listing, signal_user

RAN_MS = 2.0              # CPU time the user's processes may run in a block (a late stop's last steps)
_DEAD = "ZX"              # thread states of an exit that is over
GPU_FILES = ("/dev/nvidia",)  # what a process that holds a GPU has open or mapped (nvidiactl, nvidia0, nvidia-uvm)
_LATE_PATIENCE_S = 0.05   # the wait for a stop once a block of the run has begun without one


@dataclass
class FrozenBlock:
    """One block of a `Freezer`: whether every process of the users was seen stopped as it began
    (`stopped`), and, once it has ended: the milliseconds their threads ran in it (`ran_ms`), how many
    threads stopped as it began were scheduled in since (`scheduled`) and how many came or went
    (`changed`). A stopped thread does none of these. A process exiting is waited for as the block begins,
    and one still exiting then is counted like any other: its exit's work in the kernel runs beside the
    baselines as surely as user code would."""

    stopped: bool
    ran_ms: float = 0.0
    scheduled: int = 0
    changed: int = 0
    gpu_holders: tuple[int, ...] = ()   # pids of the user's processes, the child's excepted, that held the GPU
    gpu_orphans: tuple[int, ...] = ()   # contexts whose process, seen as the solution's user, is gone
    gpu_foreign: tuple[int, ...] = ()   # contexts whose process is gone, never seen as anyone's
    gpu_unlisted: str = ""              # why the GPU's contexts could not be read, once they had been

    @property
    def quiet(self) -> bool:
        return (self.ran_ms <= RAN_MS and not self.scheduled and not self.changed and not self.gpu_holders
                and not self.gpu_orphans and not self.gpu_foreign and not self.gpu_unlisted)

    @property
    def fault(self) -> str | None:
        """"harness" where nothing the block saw is known to be the solution's doing (result.Fault)."""
        mine = self.ran_ms > RAN_MS or self.scheduled or self.changed or self.gpu_holders or self.gpu_orphans
        return None if mine or self.quiet else "harness"

    def why_not_quiet(self, during: str = "while the baselines were timed") -> str:
        """Why the block was not quiet; `during`: what its processes were stopped for (the GPU's reasons name the
        baselines' timing, the one block that watches the GPU)."""
        if self.gpu_holders:
            return (f"a process of the solution other than its child (pid {', '.join(map(str, self.gpu_holders))}) "
                    "held the GPU while the baselines were timed: work it queued runs on through a stop and slows "
                    "them (every kernel must run in the solution's own process, inside forward)")
        if self.gpu_orphans:
            return (f"the driver listed a CUDA context of a process of the solution that has exited (pid "
                    f"{', '.join(map(str, self.gpu_orphans))}) while the baselines were timed: its descriptors of "
                    "/dev/nvidia* were passed on, so work it queued ran beside them (every kernel must run in the "
                    "solution's own process, inside forward)")
        if self.gpu_foreign:
            return (f"the driver listed a CUDA context of a process that has exited (pid "
                    f"{', '.join(map(str, self.gpu_foreign))}), never seen as this solution's, on the GPU while the "
                    "baselines were timed: its work ran beside them, so no timing was taken (a harness fault)")
        if self.gpu_unlisted:
            return (f"the GPU's contexts could not be listed while the baselines were timed ({self.gpu_unlisted}): "
                    "no timing was taken (a harness fault)")
        return (f"the solution's processes ran for {self.ran_ms:.3g} ms ({self.scheduled} stopped threads scheduled "
                f"in, {self.changed} threads came or went) in a block where they were stopped {during} (something "
                "continued them: timers that send SIGCONT?)")


class Freezer:
    """Stops every process of each of `uids` for a block (`frozen()`), and continues them when it ends,
    however it ends. The kernel stops all of a uid's processes in one pass (user_signals), so a fork
    cannot slip past; the pass is made again while any is seen running, since a process signalled early
    may continue one signalled late. Root only: otherwise it stops nothing (sandboxed processes then run
    as the caller).

    Each uid's helper is started once, on first use, and kept until `close()`: a helper for every signal
    cost ~5 ms (a fork) to ~25 ms (a new interpreter), two a round, all of it GPU time held alone. The
    uid's processes may stop or kill it; when it does not answer in time it is killed and that uid gets a
    helper for every signal from then on. The check that every process is stopped is a listing of /proc,
    the helper itself excepted only while its pidfd says it is alive after the listing (so its pid cannot
    have been reused)."""

    def __init__(self, uids: Iterable[int], gpu_allowed: Iterable[int] = (), gpu_files: tuple[str, ...] = GPU_FILES,
                 gpu_contexts: ContextWatch | None = None):
        self.uids = [u for u in dict.fromkeys(uids) if u > 0] if os.geteuid() == 0 else []
        self.gpu_allowed, self.gpu_files = frozenset(gpu_allowed), gpu_files   # pids that may hold the GPU
        self.gpu_contexts = gpu_contexts   # the GPU's contexts as the driver names them (gpu_contexts.py)
        self._helpers: dict[int, Helper | None] = {}   # uid -> its helper; None: failed, one for every signal
        self._patience_s = PATIENCE_S

    def __enter__(self) -> Freezer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for helper in self._helpers.values():
            if helper is not None:
                helper.close()
        self._helpers.clear()

    @contextmanager
    def frozen(self) -> Iterator[FrozenBlock]:
        """Every process of the uids stopped for the block; the block's record, complete once it ends. The uids are
        marked held stopped meanwhile (stop_holds.py), so that another evaluation's bystander stop does not continue
        them before this block's end does."""
        with held_stopped(self.uids):
            with self._frozen() as block:
                yield block

    @contextmanager
    def _frozen(self) -> Iterator[FrozenBlock]:
        sent: list[int] = []
        block = FrozenBlock(stopped=True)
        try:
            for uid in self.uids:
                sent.append(uid)
                self._signal(uid, signal.SIGSTOP)
            deadline, pause = time.monotonic() + self._patience_s, 0.0002
            time.sleep(pause)   # a sleeping process stops once it is woken: a listing read too soon is read again
            before = self._listing()
            while _running(before) and time.monotonic() < deadline:
                time.sleep(pause)   # a stop takes microseconds where the process is not inside the kernel
                pause = min(2 * pause, 0.005)
                for uid in self.uids:
                    self._signal(uid, signal.SIGSTOP)
                before = self._listing()
            block.stopped = not _running(before)
            if not block.stopped:   # a process that stays inside the kernel (a vfork's parent) costs this once
                self._patience_s = _LATE_PATIENCE_S
            yield block
            # Before they are continued. Stopped, none could start another process: their own are read again
            # (a new thread is in its process's listing); late, every process of the machine is.
            after = self._listing(before.keys() if block.stopped else None)
            # Stopped, none can open the GPU; one gone since the listing before is a change already: read once.
            self._gpu(block, after)
            # A thread already dead as the block began (Z or X: its exit done, not yet reaped) runs nothing more;
            # that it is gone at the end is no change (a thread of the child's ending then, 2026-11-28).
            then, now = _threads(before), _threads(after)
            dead = {k for k, t in then.items() if t.state in _DEAD}
            common = [(t, now[k]) for k, t in then.items() if k in now and k not in dead]
            block.ran_ms = sum(max(0, n.run_ns - t.run_ns) for t, n in common if n.run_ns >= 0) / 1e6
            block.scheduled = sum(t.state in ("T", "t") and n.runs != t.runs for t, n in common)
            block.changed = len((then.keys() ^ now.keys()) - dead) + sum(n.runs < 0 for _, n in common)
        finally:
            for uid in sent:
                self._signal(uid, signal.SIGCONT)

    def gpu_look(self) -> FrozenBlock:
        """Inside a block: what holds the GPU now among the users' processes, the allowed excepted (a descriptor or
        mapping of its files, a context the driver lists, a context whose process is gone), as a block's record
        whose other fields are empty: for a block that ends early (the GPU never free of work), to say whose."""
        block = FrozenBlock(stopped=True)
        self._gpu(block, self._listing())
        return block

    def _gpu(self, block: FrozenBlock, seen: dict[tuple[int, int], Seen]) -> None:
        """Who of `seen` (the users' processes), the allowed excepted, holds the GPU, and what the driver lists."""
        block.gpu_holders = tuple(sorted(pid for _, pid in seen if pid not in self.gpu_allowed
                                         and holds(pid, self.gpu_files)))
        if self.gpu_contexts is not None:
            self._contexts(block)

    def _contexts(self, block: FrozenBlock) -> None:
        """The driver's view at the block's end: a live process of the users other than the allowed with a context
        of its own holds the GPU (its descriptors may be elsewhere; unless the user is shared: `gpu_files` empty),
        and a context whose process is gone ran beside the windows: the solution's where its process was seen as
        one of the users (and the user is not shared), else no one's that the harness can tell."""
        look = self.gpu_contexts.look()
        block.gpu_unlisted = look.error
        own = bool(self.gpu_files)
        if own:
            held = {pid for pid, uid in look.live.items() if uid in self.uids and pid not in self.gpu_allowed}
            block.gpu_holders = tuple(sorted(held | set(block.gpu_holders)))
        mine = {pid for pid in look.orphans if own and self.gpu_contexts.owner(pid) in self.uids}
        block.gpu_orphans = tuple(sorted(mine))
        block.gpu_foreign = tuple(sorted(set(look.orphans) - mine))

    def _signal(self, uid: int, sig: int) -> bool:
        if uid not in self._helpers:
            self._helpers[uid] = Helper.start(uid)
        helper = self._helpers[uid]
        if helper is not None:
            if helper.send(sig):
                return True
            helper.close()   # stopped, killed or refused by a process of `uid`: no second chance
            self._helpers[uid] = None
        return signal_user(uid, sig)

    def _listing(self, only: Iterable[tuple[int, int]] | None = None) -> dict[tuple[int, int], Seen]:
        """(uid, pid) -> what was seen of it, for the live processes of the uids but their helpers (of the
        (uid, pid) pairs `only` where given)."""
        seen: dict[tuple[int, int], Seen] = {}
        for uid in self.uids:
            found = listing(uid, None if only is None else [pid for u, pid in only if u == uid])
            helper = self._helpers.get(uid)
            if helper is not None and helper.proc.pid in found and helper.alive():  # alive after the listing
                del found[helper.proc.pid]
            seen.update(((uid, pid), s) for pid, s in found.items() if s.states - set(_DEAD))
        return seen


def holds(pid: int, files: tuple[str, ...]) -> bool:
    """Whether process `pid` has a file whose path starts with one of `files` open or mapped (a mapping
    outlives its descriptor's close), in any of its threads: a thread may have a descriptor table of its
    own (unshare(CLONE_FILES)), and once the leader thread has exited /proc/PID/fd and /proc/PID/maps read
    empty while the others hold both (2026-11-28 review)."""
    if not files:
        return False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:   # it ended
        return False
    mapped = False   # the process's mappings read, from a live thread (its threads share them)
    for tid in tids:
        task = f"/proc/{pid}/task/{tid}"
        with suppress(OSError):
            for fd in os.listdir(f"{task}/fd"):
                with suppress(OSError):
                    if os.readlink(f"{task}/fd/{fd}").startswith(files):
                        return True
        if not mapped:
            with suppress(OSError), open(f"{task}/maps") as f:
                paths = [line.rstrip().split(maxsplit=5)[-1] for line in f if "/" in line]
                mapped = bool(paths)   # a leader that has exited reads empty: the next thread's are read
                if any(path.startswith(files) for path in paths):
                    return True
    return False


def _threads(seen: dict[tuple[int, int], Seen]) -> dict[tuple[int, int, int], Thread]:
    """(uid, pid, thread id) -> the thread: a thread that ends and one that starts are two changes, whatever
    the processes' totals say."""
    return {(*k, tid): t for k, s in seen.items() for tid, t in s.threads.items()}


def _running(seen: dict[tuple[int, int], Seen]) -> bool:
    """Whether a thread runs: one that a stop has yet to reach, or one whose process is exiting, which no stop
    reaches: its exit may run hundreds of milliseconds in the kernel (gigabytes of pages freed: 177-288 ms of
    CPU, 2026-11-28 review), so the block begins once it is over (an honest exit takes well under a ms)."""
    return any(t.state not in STOPPED for s in seen.values() for t in s.threads.values())
