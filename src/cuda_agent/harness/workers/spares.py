"""The two processes of an evaluation, and spare pairs started ahead of the next ones.

Each evaluation needs a fresh reference worker and a fresh solution child (no solution may run
where another ran). Starting them is seconds of importing torch and creating a CUDA context; inside
`keep_warm(depth)` (a process that judges one solution after another) `depth` pairs start while
the current evaluation runs, so the next evaluations find them waiting for their jobs. Where cores
are given, spares start on the `background` cores and the solution child of a pair taken for an
evaluation (the process that times) moves to the `foreground` ones, so nothing starting up or
building runs on the cores of a process that is timing.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from cuda_agent.devices import Backend, lock_name
from cuda_agent.harness.config import EvalConfig
from cuda_agent.home import subdir
from cuda_agent.sandbox import Exchange, Process, SandboxUser, UserSlot, claim_user

WARM_ENV = "CUDA_AGENT_WARM_DEVICE"  # set for a spare: create the CUDA context before the job comes
# Set for a spare's reference worker (the device lock's key): pay torch.compile's first-use costs (imports,
# Inductor's set-up: 5 s of a fresh worker's 5.6 s compile of sbr_small on 2 cores) before the job comes, the
# lock held shared as for any compile; every evaluation compiles its baselines to time them paired.
WARM_COMPILE_ENV = "CUDA_AGENT_WARM_COMPILE"


@dataclass
class Pair:
    exchange: Exchange
    ref: Process
    child: Process
    key: tuple
    slot: UserSlot | None = None  # the child's own sandbox user, held while it lives

    def alive(self) -> bool:
        return self.ref.proc.poll() is None and self.child.proc.poll() is None

    def pin(self, cores: set[int] | None, child_only: bool = False) -> None:
        """Run the processes (or only the solution child, which times) on `cores` (None: leave them)."""
        if not cores:
            return
        for p in (self.child,) if child_only else (self.ref, self.child):
            try:
                os.sched_setaffinity(p.proc.pid, cores)
            except OSError:  # it died meanwhile: the evaluation says so
                pass

    def close(self) -> None:
        for p in (self.child, self.ref):
            p.close()
        self.exchange.close()
        if self.slot is not None:
            self.slot.release()


def _key(user: SandboxUser | None, backend: Backend, config: EvalConfig) -> tuple:
    return user, backend.device, config.memory_limit_gb


def start_pair(user: SandboxUser | None, backend: Backend, config: EvalConfig, spare: bool = False) -> Pair:
    """A reference worker and a solution child; with a sandbox `user` (the harness is root), the
    child runs as a user of its own (a slot no other live child holds), else as `user` itself.
    A `spare` (started ahead of its evaluation) warms torch.compile up while it waits."""
    slot = claim_user() if user is not None else None
    child_user = slot.user if slot is not None else user
    ex = Exchange(child_user)
    # On the CPU backend every process times with one thread: the solution's C++ runs on one, and an
    # eager baseline's OpenMP threads would otherwise be timed against whatever else the machine runs.
    env = {WARM_ENV: backend.device} if backend.is_cuda else {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # The reference worker compiles the task's model for every evaluation (its baselines are timed paired with
    # the solution): its Inductor and Triton caches are the home's, shared by every reference worker and out
    # of the children's reach (the home is the harness user's alone), so a task compiles from scratch once.
    compiled = subdir("inductor")
    ref_env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(compiled), "TRITON_CACHE_DIR": str(compiled / "triton")}
    if spare and config.profile:  # an evaluation that only checks correctness (RL rewards often) never compiles
        ref_env[WARM_COMPILE_ENV] = lock_name(backend.device) if config.quiet_host else ""
    try:
        # Forked from a process that imported torch once, on the CPU backend. On CUDA (CUDA_AGENT_FORK_SERVER=1) it
        # passed the device's harness tests once (2026-11-27, torch alone preloaded); off there until it is the default.
        forked = not backend.is_cuda
        ref = Process("cuda_agent.harness.workers.reference", cwd=ex.private, log=ex.private / "reference.log",
                      fork_server=forked, env=ref_env)
        child = Process("cuda_agent.harness.workers.child", cwd=ex.public, log=ex.private / "child.log",
                        user=child_user, memory_bytes=int(config.memory_limit_gb * 2**30),
                        limit_address_space=not backend.is_cuda, isolate_network=True, fork_server=forked, env=env)
    except BaseException:
        ex.close()
        if slot is not None:
            slot.release()
        raise
    return Pair(ex, ref, child, _key(user, backend, config), slot)


_lock = threading.Lock()
_spares: deque[Pair] = deque()
_depths: list[int] = []                      # the depth of each open keep_warm() block
_cores: dict[str, set[int] | None] = {"foreground": None, "background": None}


def take_pair(user: SandboxUser | None, backend: Backend, config: EvalConfig) -> Pair:
    """A pair for this evaluation: the oldest spare that fits and lives, else a new one; inside
    keep_warm() the spares are topped up to its depth now, on the background cores. Where no cores
    are set aside, not for an evaluation that times: a spare's start (seconds of importing torch)
    would run beside its timing; the next evaluation that does not time tops them up."""
    with _lock:
        pair = None
        while _spares and pair is None:
            candidate = _spares.popleft()
            if candidate.key == _key(user, backend, config) and candidate.alive():
                pair = candidate
            else:
                candidate.close()
        if pair is None:
            pair = start_pair(user, backend, config)
        pair.pin(_cores["background"])  # the reference stays there (a pair started just now was not)
        pair.pin(_cores["foreground"], child_only=True)
        while len(_spares) < max(_depths, default=0) and (_cores["background"] or not config.profile):
            spare = start_pair(user, backend, config, spare=True)
            spare.pin(_cores["background"])
            _spares.append(spare)
    return pair


@contextmanager
def keep_warm(depth: int = 1, foreground: set[int] | None = None,
              background: set[int] | None = None) -> Iterator[None]:
    """Evaluations in this block start `depth` evaluations' processes ahead of time; with cores
    given, spares start on `background` and a pair taken runs on `foreground`."""
    with _lock:
        _depths.append(depth)
        if foreground or background:
            _cores.update(foreground=foreground, background=background)
    try:
        yield
    finally:
        with _lock:
            _depths.remove(depth)
            left = max(_depths, default=0)
            extra = [_spares.pop() for _ in range(max(0, len(_spares) - left))]
            if not _depths:
                _cores.update(foreground=None, background=None)
        for spare in extra:
            spare.close()
