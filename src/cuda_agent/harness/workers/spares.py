"""The two processes of an evaluation, and a spare pair started ahead of the next one.

Each evaluation needs a fresh reference worker and a fresh solution child (no solution may run
where another ran). Starting them is seconds of importing torch and creating a CUDA context; inside
`keep_warm()` (a bench, an agent's run) the next pair starts while the current evaluation runs,
so the next evaluation finds them waiting for its job.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from cuda_agent.harness.backend import Backend
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.workers.process import Exchange, Process
from cuda_agent.harness.workers.sandbox import SandboxUser, UserSlot, claim_user

WARM_ENV = "CUDA_AGENT_WARM_DEVICE"  # set for a spare: create the CUDA context before the job comes


@dataclass
class Pair:
    exchange: Exchange
    ref: Process
    child: Process
    key: tuple
    slot: UserSlot | None = None  # the child's own sandbox user, held while it lives

    def alive(self) -> bool:
        return self.ref.proc.poll() is None and self.child.proc.poll() is None

    def close(self) -> None:
        for p in (self.child, self.ref):
            p.close()
        self.exchange.close()
        if self.slot is not None:
            self.slot.release()


def _key(user: SandboxUser | None, backend: Backend, config: EvalConfig) -> tuple:
    return user, backend.device, config.memory_limit_gb


def start_pair(user: SandboxUser | None, backend: Backend, config: EvalConfig) -> Pair:
    """A reference worker and a solution child; with a sandbox `user` (the harness is root), the
    child runs as a user of its own (a slot no other live child holds), else as `user` itself."""
    slot = claim_user() if user is not None else None
    child_user = slot.user if slot is not None else user
    ex = Exchange(child_user)
    env = {WARM_ENV: backend.device} if backend.is_cuda else {}
    try:
        ref = Process("cuda_agent.harness.workers.reference", cwd=ex.private, log=ex.private / "reference.log", env=env)
        child = Process("cuda_agent.harness.workers.child", cwd=ex.public, log=ex.private / "child.log",
                        user=child_user, memory_bytes=int(config.memory_limit_gb * 2**30),
                        limit_address_space=not backend.is_cuda, isolate_network=True, env=env)
    except BaseException:
        ex.close()
        if slot is not None:
            slot.release()
        raise
    return Pair(ex, ref, child, _key(user, backend, config), slot)


_lock = threading.Lock()
_spare: Pair | None = None
_warm = 0  # depth of keep_warm() blocks


def take_pair(user: SandboxUser | None, backend: Backend, config: EvalConfig) -> Pair:
    """A pair for this evaluation: the spare when it fits and lives, else a new one; inside
    keep_warm() the next spare starts now."""
    global _spare
    with _lock:
        pair, _spare = _spare, None
        if pair is not None and not (pair.key == _key(user, backend, config) and pair.alive()):
            pair.close()
            pair = None
        if pair is None:
            pair = start_pair(user, backend, config)
        if _warm:
            _spare = start_pair(user, backend, config)
    return pair


@contextmanager
def keep_warm() -> Iterator[None]:
    """Evaluations in this block start the next evaluation's processes ahead of time."""
    global _warm, _spare
    with _lock:
        _warm += 1
    try:
        yield
    finally:
        with _lock:
            _warm -= 1
            spare, _spare = (_spare, None) if not _warm else (None, _spare)
        if spare is not None:
            spare.close()
