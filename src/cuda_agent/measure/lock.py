"""The device lock: what keeps the GPU, and the host, quiet while a figure is taken.

Evaluations running in parallel hold a device's lock shared while they run on it; CPU-heavy work
that runs beside timing on the same machine (a kernel build, the torch.compile of a baseline) holds
it shared too; timing holds it alone. So a timer waits until the builds and compiles in flight end,
and new ones wait while it times: a model whose time is the host's (Python and launch overhead,
KernelBench level 3) is not timed against compilers for the CPU (H100, 2026-11-24: level-3 eager
medians moved 0.66-2.18x between two runs while other workers compiled beside the timed one).

A timer waiting for the lock goes first: newcomers queue behind it at a turnstile, so a busy device
never starves timing. The lock is re-entrant within a thread: a block that holds it (shared or
alone) may enter a shared block again at once, where a second flock would queue behind a waiting
timer that itself waits for the first: a deadlock. Asking for it alone while holding it shared is
the program's bug (it would wait for itself) and raises; `alone_within` is the way to hold it alone
for a moment inside a shared hold (GPU benchmarks inside a compile). Threads and processes are separate
holders. flock's locks go with the process: one killed while holding the lock releases it.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ContextManager, Iterator

from cuda_agent.devices import lock_name
from cuda_agent.home import flock_within, locks, subdir


class LockOrderError(RuntimeError):
    """A thread holding a device's lock shared asked for it alone (it would wait for itself)."""


@dataclass
class _Hold:
    shared: bool
    file: IO[str]   # the open lock file whose flock this thread holds
    gate: Path      # the turnstile beside it
    depth: int = 1


_local = threading.local()
_waited = [0.0]                  # seconds this process's threads have spent waiting to take a device lock
_waited_guard = threading.Lock()


_alone = [0.0]                   # seconds this process has held a device lock alone (timing, autotuning, retries)


def held_alone_s() -> float:
    """Seconds this process has held device locks alone, in all, summed over its threads and devices (two threads
    holding two devices' locks alone for a second count two): what it kept every other user of the device waiting
    for (synth's workers, one thread each, report it by request)."""
    return _alone[0]


def _count_alone(t: float) -> None:
    with _waited_guard:
        _alone[0] += time.perf_counter() - t


def waited_s() -> float:
    """Seconds this process has waited, in all, to take device locks (shared or alone): the part of
    a stage's time that was the queue for the device, not its own work (synth's workers report it)."""
    return _waited[0]


def _holds() -> dict[Path, _Hold]:
    """This thread's holds, by lock file. A process forked by a holder starts with none: the flock
    it inherited is its parent's, released whenever the parent releases it."""
    if getattr(_local, "pid", None) != os.getpid():
        _local.pid, _local.holds = os.getpid(), {}
    return _local.holds


@contextmanager
def device_lock(key: str, shared: bool = False, lock_dir: Path | None = None) -> Iterator[None]:
    """One device (`key`, e.g. "cuda0") across processes: shared for work on the device or beside
    its timing (runs, builds, compiles), alone (`shared=False`) to time."""
    lock_dir = lock_dir or locks()
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = (lock_dir / f"{key}.lock").resolve()
    holds = _holds()
    hold = holds.get(path)
    if hold is not None:
        if hold.shared and not shared:
            raise LockOrderError(f"this thread holds the lock of {key} shared and asks for it alone, which would "
                                 "wait for itself forever: end the shared block before the one that times")
        hold.depth += 1  # held already, in a mode that covers this one
        try:
            yield
        finally:
            hold.depth -= 1
        return
    gate = lock_dir / f"{key}.turnstile"
    with open(path, "a") as f:
        _take(f, gate, shared)
        holds[path] = _Hold(shared, f, gate)
        t = time.perf_counter()
        try:
            yield
        finally:
            holds.pop(path, None)  # gone already where a let_go() inside could not take it back
            fcntl.flock(f, fcntl.LOCK_UN)
            if not shared:
                _count_alone(t)


def _take(f: IO[str], gate_path: Path, shared: bool) -> None:
    """flock `f` shared or alone, through the turnstile: a shared taker passes it at once unless a
    timer waits there; a timer holds it until it has the lock, so newcomers queue behind it."""
    t = time.perf_counter()
    try:
        _take_flock(f, gate_path, shared)
    finally:
        with _waited_guard:
            _waited[0] += time.perf_counter() - t


def _take_flock(f: IO[str], gate_path: Path, shared: bool) -> None:
    with open(gate_path, "a") as gate:
        if shared:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(f, fcntl.LOCK_SH)
        else:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(f, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)


@contextmanager
def alone_within(key: str, lock_dir: Path | None = None) -> Iterator[None]:
    """The device alone for a short block inside a shared hold of this thread (a compile whose
    first call benchmarks kernels on the GPU, as Inductor's autotuner does): the shared hold is let
    go, the lock taken alone like a timer takes it, and the shared hold taken back after. Letting
    go first is what keeps two such blocks from waiting for each other's shared holds forever;
    meanwhile a timer or another such block may go first. Without a hold: the lock alone."""
    lock_dir = lock_dir or locks()
    path = (lock_dir / f"{key}.lock").resolve()
    hold = _holds().get(path)
    if hold is None or not hold.shared:
        with device_lock(key, shared=False, lock_dir=lock_dir):
            yield
        return
    fcntl.flock(hold.file, fcntl.LOCK_UN)
    t = None
    try:
        _take(hold.file, hold.gate, shared=False)
        hold.shared, t = False, time.perf_counter()
        yield
    finally:
        fcntl.flock(hold.file, fcntl.LOCK_UN)
        if t is not None:
            _count_alone(t)
        hold.shared = True
        _take(hold.file, hold.gate, shared=True)


@contextmanager
def let_go(key: str, lock_dir: Path | None = None) -> Iterator[bool]:
    """This thread's shared hold of lock `key` let go for a block of CPU work (torch.compile's tracing
    and code generation, seconds), taken back shared after it; yields whether there was one to let
    go. A timer waiting for the device then need not wait for the block, nor the newcomers queued
    behind that timer (synth's workers, 2026-11-28: a 6 s compile held shared kept a GPU's five other
    workers waiting behind each timing). Inside the block the thread holds no lock: device work there
    takes the lock itself, and must have let it go again by the block's end (LockOrderError
    otherwise: taking the hold back would wait for itself)."""
    path = ((lock_dir or locks()) / f"{key}.lock").resolve()
    holds = _holds()
    hold = holds.get(path)
    if hold is None or not hold.shared:
        yield False
        return
    fcntl.flock(hold.file, fcntl.LOCK_UN)
    del holds[path]
    try:
        yield True
    finally:
        if holds.get(path) is not None:
            raise LockOrderError(f"the lock of {key} was still held at the end of a block that let it go: "
                                 "release what the block took before taking the hold back")
        try:
            _take(hold.file, hold.gate, shared=True)
        except BaseException:  # the turnstile failed (a file error, an interrupt): the hold back all the same
            fcntl.flock(hold.file, fcntl.LOCK_SH)
            raise
        finally:
            holds[path] = hold


COMPILE_TURNS = 4096  # lock files for compile_turn(): tasks share one where their keys' hashes meet
TURN_WAIT_S = 180.0   # the longest a compile waits for its turn, then goes ahead without it


@contextmanager
def compile_turn(task_key: str, lock_dir: Path | None = None, max_wait_s: float = TURN_WAIT_S) -> Iterator[bool]:
    """One torch.compile of a task at a time in this home (`task_key`: the task's identity, such as a
    hash of its source and the device), taken while this thread holds no device lock (LockOrderError
    otherwise: a holder waiting for a turn could stall the turn's holder, whose autotuning takes the
    device alone). The first compiles and fills Inductor's caches (its graphs and its autotuner's
    choices, on disk); the next ones find them there and take seconds. Compiled at once, each compiled
    and autotuned for itself and their autotuning waited for each other's device holds (H200,
    2026-11-27: three evaluators' first compiles of one task, ~90 s each; 13 s alone). A turn not had
    within `max_wait_s` (a compile Inductor cannot cache, a task whose key meets another's in one of
    COMPILE_TURNS files) is gone without: the block runs anyway. Yields whether it had the turn."""
    import hashlib

    if _holds():
        raise LockOrderError("compile_turn() inside a device lock's hold: take the turn first, then the lock")
    # the home's, not the machine's: what a turn buys is the home's Inductor cache (harness/workers/spares.py), so
    # another home's compile of the task gains nothing by waiting for it (2026-11-28, H200: eight test homes'
    # compiles of one task in one machine-wide turn stalled a CUDA test run past its limit)
    lock_dir = lock_dir or subdir("locks")
    lock_dir.mkdir(parents=True, exist_ok=True)
    turn = int(hashlib.sha256(task_key.encode()).hexdigest(), 16) % COMPILE_TURNS
    with open(lock_dir / f"compile-{turn}.lock", "a") as f:
        had = flock_within(f, max_wait_s, pause=0.05)
        try:
            yield had
        finally:
            if had:
                fcntl.flock(f, fcntl.LOCK_UN)


def beside_timing(device: str, quiet: bool = True) -> ContextManager[None]:
    """The hold of CPU-heavy work that runs beside timing (a build, a torch.compile) for `device`
    ("cuda" or "cpu"): its lock shared, so that no timer on it runs meanwhile; `quiet=False`: none."""
    return device_lock(lock_name(device), shared=True) if quiet else nullcontext()
