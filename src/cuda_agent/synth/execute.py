"""The parent's side of the synth worker: one child process kept warm across candidates (torch
import and torch.compile's own start-up are paid once), restarted after any crash, hang or
unexpected error, so one candidate can never poison the next."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.harness import ChildFailed, Process

WORKER_MODULE = "cuda_agent.synth.worker"


@dataclass(frozen=True)
class Limits:
    start_s: float = 120.0
    eager_s: float = 120.0
    compile_s: float = 300.0
    memory_bytes: int | None = 32 << 30
    recycle_every: int = 100  # fresh child after this many candidates (leaks, fragmentation)


@dataclass
class Executor:
    """A warm worker child in `workdir`; `gpu` pins it to one GPU (CUDA_VISIBLE_DEVICES)."""
    workdir: Path
    gpu: str | None = None
    limits: Limits = field(default_factory=Limits)
    start_seconds: float = 0.0
    _proc: Process | None = None
    _served: int = 0

    def _env(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")} if "OMP_NUM_THREADS" in os.environ else {}
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        return env

    def _ensure(self) -> Process:
        if self._proc is not None and self._served >= self.limits.recycle_every:
            self.close()
        if self._proc is None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            proc = Process(WORKER_MODULE, cwd=self.workdir, log=self.workdir / "worker.log",
                           memory_bytes=self.limits.memory_bytes, env=self._env())
            try:
                proc.recv(self.limits.start_s)
            except ChildFailed:
                proc.close()
                raise
            self.start_seconds += time.perf_counter() - t
            self._proc, self._served = proc, 0
        return self._proc

    def request(self, message: dict, timeout_s: float) -> dict:
        """The worker's reply; a dead or hung child becomes a failed reply and a fresh child next time."""
        try:
            proc = self._ensure()
            reply = proc.request(message, timeout_s)
        except ChildFailed as e:
            self.close()
            return {"ok": False, "reason": f"worker {e}", "crashed": True}
        if "trace" in reply:  # an error we did not foresee: do not trust this child's state
            self.close()
        return reply

    def next_candidate(self) -> None:
        self._served += 1

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.send({"op": "quit"})
            except ChildFailed:
                pass
            self._proc.close()
            self._proc = None

    def clean(self) -> None:
        self.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
