"""The two processes of an evaluation, spares started ahead of the next ones, and reference
workers kept for the next evaluation of their task.

Each evaluation needs a fresh solution child (no solution may run where another ran) and a
reference worker (trusted: no solution ever runs there). Starting them is seconds of importing
torch and creating a CUDA context; inside `keep_warm(depth)` (a process that judges one solution
after another) `depth` pairs start while the current evaluation runs, so the next evaluations find
them waiting for their jobs. Where cores are given, spares start on the `background` cores and the
solution child of a pair taken for an evaluation (the process that times) moves to the
`foreground` ones, so nothing starting up or building runs on the cores of a process that is timing.

Inside keep_warm(), a reference worker that served an evaluation to its end is kept (`finish`) for
the next evaluation of the same task (RL judges several replies to one prompt): it keeps the task's module, so the
reference's torch.compile, which every evaluation that times needs for its paired baselines, hits
torch's cache (a new instance of the same classes: milliseconds, where a compile takes seconds to
tens of seconds). Before it is kept it synchronizes its device and answers (then, while the harness
goes on, drops everything of the evaluation: model, outputs, timing, fingerprints); it is closed
instead where the evaluation failed on its side, where it does not answer, or where its compile
stopped hitting the cache.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import secrets
import shutil
import tempfile
import threading
from collections import OrderedDict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from cuda_agent.devices import Backend, lock_name
from cuda_agent.harness.config import EvalConfig
from cuda_agent.home import subdir
from cuda_agent.sandbox import ChildFailed, Exchange, Process, SandboxUser, UserSlot, claim_user

WARM_ENV = "CUDA_AGENT_WARM_DEVICE"  # set for a spare: create the CUDA context before the job comes
# Set for a spare's reference worker (the device lock's key): pay torch.compile's first-use costs (imports,
# Inductor's set-up: 5 s of a fresh worker's 5.6 s compile of sbr_small on 2 cores) before the job comes, the
# lock held shared as for any compile; every evaluation compiles its baselines to time them paired.
WARM_COMPILE_ENV = "CUDA_AGENT_WARM_COMPILE"
WARM_OFF_LOCK_ENV = "CUDA_AGENT_WARM_OFF_LOCK"   # "1": that compile's stretches let go of the lock (compile_off_lock)
KEPT_REFERENCES = 2      # reference workers kept for their task's next evaluation, per process (the least recent goes)
REFERENCE_JOBS = 64      # evaluations one reference worker serves at most (whatever it holds is bounded)
NEXT_TIMEOUT_S = 30.0    # for a kept reference worker's answer that it dropped the evaluation


@dataclass
class Reference:
    """A reference worker and the folder it runs in (its own: it may outlive the evaluation's)."""
    process: Process
    home: Path
    jobs: int = 0        # evaluations it has been given

    def alive(self) -> bool:
        return self.process.proc.poll() is None

    def close(self) -> None:
        self.process.close()
        shutil.rmtree(self.home, ignore_errors=True)


@dataclass
class Pair:
    exchange: Exchange   # the solution child's folders (public: its own) and the job's private files
    reference: Reference
    child: Process
    key: tuple
    slot: UserSlot | None = None  # the child's own sandbox user, held while it lives
    note: str = ""                # why no spare could be started when this pair was taken ("" when they were)

    @property
    def ref(self) -> Process:
        return self.reference.process

    def alive(self) -> bool:
        return self.reference.alive() and self.child.proc.poll() is None

    def pin(self, cores: set[int] | None, child_only: bool = False) -> None:
        """Run the processes (or only the solution child, which times) on `cores` (None: leave them)."""
        if not cores:
            return
        for p in (self.child,) if child_only else (self.ref, self.child):
            try:
                os.sched_setaffinity(p.proc.pid, cores)
            except OSError:  # it died meanwhile: the evaluation says so
                pass

    def close_child(self) -> None:
        self.child.close()
        self.exchange.close()
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    def close(self) -> None:
        self.close_child()
        self.reference.close()


def _key(user: SandboxUser | None, backend: Backend, config: EvalConfig) -> tuple:
    return user, backend.device, config.memory_limit_gb


def task_digest(code: str) -> str:
    """What a kept reference worker is kept for: its task's source."""
    return hashlib.sha256(code.encode()).hexdigest()


def _env(backend: Backend) -> dict[str, str]:
    # On the CPU backend every process times with one thread: the solution's C++ runs on one, and an
    # eager baseline's OpenMP threads would otherwise be timed against whatever else the machine runs.
    return {WARM_ENV: backend.device} if backend.is_cuda else {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def start_reference(backend: Backend, config: EvalConfig, spare: bool = False) -> Reference:
    """A reference worker in a folder of its own; a `spare` (started ahead of its evaluation) warms
    torch.compile up while it waits."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    home = Path(tempfile.mkdtemp(prefix="cuda_agent_ref_", dir=base))
    # The reference worker compiles the task's model for every evaluation that times (its baselines are timed
    # paired with the solution): its Inductor and Triton caches are the home's, shared by every reference worker
    # and out of the children's reach (the home is the harness user's alone), so a task compiles from scratch once.
    compiled = subdir("inductor")
    env = {**_env(backend), "TORCHINDUCTOR_CACHE_DIR": str(compiled), "TRITON_CACHE_DIR": str(compiled / "triton")}
    if spare and config.profile:  # an evaluation that only checks correctness (RL rewards often) never compiles
        env[WARM_COMPILE_ENV] = lock_name(backend.device) if config.quiet_host else ""
        env[WARM_OFF_LOCK_ENV] = "1" if config.compile_lets_go(backend.is_cuda) else ""
    try:
        # Forked from a process that imported torch once, on the CPU backend. On CUDA (CUDA_AGENT_FORK_SERVER=1) it
        # passed the device's harness tests once (2026-11-27, torch alone preloaded); off there until it is the default.
        process = Process("cuda_agent.harness.workers.reference", cwd=home, log=home / "reference.log",
                          fork_server=not backend.is_cuda, env=env)
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    return Reference(process, home)


def start_pair(user: SandboxUser | None, backend: Backend, config: EvalConfig, spare: bool = False,
               reference: Reference | None = None) -> Pair:
    """A solution child and a reference worker (`reference`, else a new one); with a sandbox `user`
    (the harness is root), the child runs as a user of its own (a slot no other live child holds),
    else as `user` itself. A `spare` (started ahead of its evaluation) warms torch.compile up while
    it waits."""
    slot = ex = ref = None
    try:
        slot = claim_user() if user is not None else None
        child_user = slot.user if slot is not None else user
        ex = Exchange(child_user)
        ref = reference or start_reference(backend, config, spare)
        child = Process("cuda_agent.harness.workers.child", cwd=ex.public, log=ex.private / "child.log",
                        user=child_user, memory_bytes=int(config.memory_limit_gb * 2**30),
                        limit_address_space=not backend.is_cuda, isolate_network=True,
                        fork_server=not backend.is_cuda, env=_env(backend))
    except BaseException:  # nothing half-made is left, a reference handed in included
        if (ref or reference) is not None:
            (ref or reference).close()
        if ex is not None:
            ex.close()
        if slot is not None:
            slot.release()
        raise
    return Pair(ex, ref, child, _key(user, backend, config), slot)


_lock = threading.Lock()
_spares: deque[Pair] = deque()
_idle: deque[tuple[tuple, Reference]] = deque()       # spares' reference workers whose child went to a kept one
_kept: OrderedDict[tuple, Reference] = OrderedDict()  # (pair key, task digest) -> a reference worker kept for it
_depths: list[int] = []                      # the depth of each open keep_warm() block
_cores: dict[str, set[int] | None] = {"foreground": None, "background": None}


def _pop_idle(key: tuple) -> Reference | None:
    while _idle:
        k, ref = _idle.popleft()
        if k == key and ref.alive():
            return ref
        ref.close()
    return None


def take_pair(user: SandboxUser | None, backend: Backend, config: EvalConfig, task: str = "") -> Pair:
    """A pair for this evaluation: the reference worker kept for `task` (its digest, `task_digest`)
    where there is one, and the oldest spare that fits and lives, else new processes; inside
    keep_warm() the spares are topped up to its depth now, on the background cores. Where no cores
    are set aside, not for an evaluation that times: a spare's start (seconds of importing torch)
    would run beside its timing; the next evaluation that does not time tops them up."""
    key = _key(user, backend, config)
    with _lock:
        kept = _kept.pop((key, task), None) if task else None
        if kept is not None and not kept.alive():
            kept.close()
            kept = None
        pair = None
        while _spares and pair is None:
            candidate = _spares.popleft()
            if candidate.key == key and candidate.alive():
                pair = candidate
            else:
                candidate.close()
        if pair is None:
            pair = start_pair(user, backend, config, reference=kept or _pop_idle(key))
        elif kept is not None:  # the spare's reference worker goes to the next spare started (below)
            _idle.append((key, pair.reference))
            while len(_idle) > max(1, max(_depths, default=0)):
                _idle.popleft()[1].close()
            pair.reference = kept
        pair.reference.jobs += 1
        pair.pin(_cores["background"])  # the reference stays there (a pair started just now was not)
        pair.pin(_cores["foreground"], child_only=True)
        try:
            while len(_spares) < max(_depths, default=0) and (_cores["background"] or not config.profile):
                spare = start_pair(user, backend, config, spare=True, reference=_pop_idle(key))
                spare.pin(_cores["background"])
                _spares.append(spare)
        except Exception as e:  # the pair taken is sound: this evaluation goes on, the next one tries again
            pair.note = f"a spare could not start: {type(e).__name__}: {e}"[:300]
        finally:
            # Reused, a displaced reference worker spares the new spare's start: importing torch, a CUDA context and
            # the warm-up compile, which holds the device lock shared (on a fresh H100, 2026-11-28: every evaluation
            # of a task with a kept worker started one, 8 at once held the lock for seconds each and the timing
            # waited: 10-35 s of "compile" an evaluation, 310 evaluations/h). One left over (no spare was started)
            # is closed on a GPU: an idle worker's CUDA context is memory the next child may need.
            while backend.is_cuda and _idle:
                _idle.popleft()[1].close()
    return pair


def finish(pair: Pair, task: str = "", reusable: bool = False) -> bool:
    """The end of an evaluation: its child and folders closed; its reference worker kept for the
    next evaluation of `task` inside keep_warm() (a process that judges one solution after another;
    elsewhere an idle worker would only hold memory) where `reusable` (it served the evaluation to
    its end or to a verdict on the solution), the child ran as a sandbox user of its own (one that
    shared the harness's user could have reached into the worker, ptrace, and stayed there for the
    next evaluations), it has served fewer than REFERENCE_JOBS and it answers that its device is
    sound and its compile still hits the cache; else closed. Returns whether it was kept.
    A kept worker keeps the task's module: tasks are taken to be stateless between calls of
    get_inputs() and Model (KernelBench's are), as every evaluation's child loads them afresh."""
    isolated = pair.slot is not None  # the child ran as a sandbox user of its own (see the docstring)
    pair.close_child()
    ref = pair.reference
    if not (task and reusable and isolated and _depths and ref.jobs < REFERENCE_JOBS and ref.alive()
            and _will_serve(ref)):
        ref.close()
        return False
    with _lock:
        kept = bool(_depths)  # else the last keep_warm() block ended meanwhile
        closing = [] if kept else [ref]
        if kept:
            if (old := _kept.pop((pair.key, task), None)) is not None:
                closing.append(old)
            _kept[(pair.key, task)] = ref
            while len(_kept) > KEPT_REFERENCES:
                closing.append(_kept.popitem(last=False)[1])
    for r in closing:
        r.close()
    return kept


def _will_serve(ref: Reference) -> bool:
    """Whether the reference worker answers that it may serve another evaluation of its task
    (replies left over from a request the evaluation did not wait for are skipped)."""
    nonce = secrets.token_hex(8)
    try:
        ref.process.send({"op": "next", "nonce": nonce})
        for _ in range(64):
            reply = ref.process.recv(NEXT_TIMEOUT_S)
            if reply.get("nonce") == nonce:
                return bool(reply.get("keep"))
    except ChildFailed:
        pass
    return False


def _close_kept() -> None:
    with _lock:
        refs = [r for r in _kept.values()] + [r for _, r in _idle]
        _kept.clear()
        _idle.clear()
    for ref in refs:
        ref.close()


atexit.register(_close_kept)


@contextmanager
def keep_warm(depth: int = 1, foreground: set[int] | None = None,
              background: set[int] | None = None) -> Iterator[None]:
    """Evaluations in this block start `depth` evaluations' processes ahead of time; with cores
    given, spares start on `background` and a pair taken runs on `foreground`. The last block's
    end closes the spares and the reference workers kept."""
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
        if not _depths:
            _close_kept()
