"""The parent's side of the synth worker: one child process kept warm across candidates (torch
import and torch.compile's own start-up are paid once), restarted after any crash, hang or
unexpected error, so one candidate can never poison the next; and the execution filters that drive
it for one candidate (the eager checks, the size search into the runtime window, torch.compile)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cuda_agent.harness import ChildFailed, Process
from cuda_agent.synth.compose import Candidate
from cuda_agent.synth.filters import ACCEPTED, Outcome, scaled_batch

if TYPE_CHECKING:
    from cuda_agent.synth.run import SynthConfig

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


class ExecutionFilters:
    """The execution filters of one candidate, with the run's window and memory budget."""

    def __init__(self, config: "SynthConfig", memory_budget: int):
        self.config, self.window, self.memory_budget = config, config.resolved_window(), memory_budget

    def execute(self, cand: Candidate, rec: dict, executor: Executor) -> Outcome:
        cfg = self.config
        seconds = rec["seconds"]
        started = executor.start_seconds
        rec["rescales"] = 0
        while True:
            reply = executor.request({"op": "eager", "code": cand.code, "device": cfg.device,
                                      "plan": cfg.timing.to_dict()}, cfg.limits.eager_s)
            add_seconds(seconds, reply.get("seconds", {}))
            if not reply.get("ok"):
                smaller = self._after_out_of_memory(cand, reply, rec["rescales"])
                if smaller is not None:  # too big for its share of a GPU: not the task's fault
                    executor.close()  # a CUDA out-of-memory error can leave the child's context unusable
                    cand.program, cand.code = smaller, smaller.source()
                    rec["rescales"] += 1
                    continue
                seconds["start"] = executor.start_seconds - started
                return Outcome(reply.get("filter", "eager"), str(reply.get("reason", ""))[:300])
            ms = reply["eager_ms"]
            rec["eager_ms"] = ms
            if self.window.contains(ms):
                break
            resized = self._resized(cand, ms)
            if resized is None or rec["rescales"] >= cfg.max_rescales:
                seconds["start"] = executor.start_seconds - started
                return Outcome("window", f"eager {ms:.3g} ms outside [{self.window.low_ms:g}, {self.window.high_ms:g}]")
            cand.program = resized
            cand.code = resized.source()
            rec["rescales"] += 1
        rec["batch"] = cand.program.batch if cand.program else None
        reply = executor.request({"op": "compile", "plan": cfg.timing.to_dict(), "atol": cfg.atol, "rtol": cfg.rtol},
                                 cfg.limits.compile_s)
        add_seconds(seconds, reply.get("seconds", {}))
        seconds["start"] = executor.start_seconds - started
        if not reply.get("ok"):
            return Outcome("compile", str(reply.get("reason", ""))[:300])
        # The dataset's figures are the baselines as the harness takes them (one function for
        # both); the size search's eager time only chose the size.
        rec["probe_eager_ms"], rec["eager_ms"], rec["compile_ms"] = rec["eager_ms"], reply["eager_ms"], reply["compile_ms"]
        rec["compile_speedup"] = round(rec["eager_ms"] / max(reply["compile_ms"], 1e-9), 4)
        if not self.window.contains(rec["eager_ms"]):
            return Outcome("window", f"eager {rec['eager_ms']:.3g} ms, timed again with torch.compile, is outside "
                                     f"[{self.window.low_ms:g}, {self.window.high_ms:g}]")
        return ACCEPTED

    def _after_out_of_memory(self, cand: Candidate, reply: dict, rescales: int):
        """A quarter of the batch when the eager run ran out of memory (workers share a GPU's
        memory), or None."""
        p = cand.program
        oom = "out of memory" in str(reply.get("reason", "")).lower()
        if not oom or p is None or p.batch <= 1 or rescales >= self.config.max_rescales:
            return None
        return p.with_batch(max(1, p.batch // 4))

    def _resized(self, cand: Candidate, ms: float):
        """The program at the size that should land in the window (time ~ batch x spatial size):
        the batch first, the spatial sizes for what the batch cannot do; None when nothing moves."""
        p = cand.program
        if p is None:
            return None
        per_sample = max(p.elems_per_sample, 1) * 4
        max_batch = max(2, min(1 << 16, self.memory_budget // per_sample))
        batch = scaled_batch(p.batch, ms, self.window, max_batch) or p.batch
        left = self.window.target_ms / max(ms, 1e-6) * p.batch / batch
        q = p.with_batch(batch)
        if not 0.7 < left < 1.4:
            q = q.with_spatial(left)
            if q.elems_per_sample * 4 * batch > self.memory_budget:
                q = p.with_batch(batch)
        return None if q.dims == p.dims else q


def add_seconds(total: dict, part: dict) -> None:
    """Adds the per-stage seconds of `part` into `total`."""
    for k, v in part.items():
        total[k] = total.get(k, 0.0) + v


def memory_share(config: "SynthConfig", sharing: int) -> int:
    """The size search's memory budget per evaluator: the configured one, but no more than half of
    a GPU's memory split between the evaluators that share it."""
    if config.device != "cuda":
        return config.memory_budget_bytes
    import torch

    total = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 0
    return min(config.memory_budget_bytes, total // 2 // max(1, sharing)) if total else config.memory_budget_bytes
