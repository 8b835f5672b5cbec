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

from cuda_agent.devices import COMPILE_THREADS_ENV, SHARED_COMPILE_THREADS
from cuda_agent.measure import TimingPlan
from cuda_agent.sandbox import ChildFailed, Process
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
    """A warm worker child in `workdir`; `gpu` pins it to one GPU (CUDA_VISIBLE_DEVICES); `threads`: its OpenMP
    threads, unless OMP_NUM_THREADS is set (None: torch's default, one a core)."""
    workdir: Path
    gpu: str | None = None
    limits: Limits = field(default_factory=Limits)
    threads: int | None = None
    start_seconds: float = 0.0
    _proc: Process | None = None
    _served: int = 0

    def _env(self) -> dict[str, str]:
        env = {}
        if "OMP_NUM_THREADS" in os.environ or self.threads is not None:
            env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", str(self.threads))
        # the workers compile beside each other: 2x H200 (2026-11-28), 12-16 workers with Inductor's default pools
        # (up to 32 subprocesses each) took 8.1-11.3 s of compile a candidate where 6 on one GPU took 4.7-6.0 s
        env[COMPILE_THREADS_ENV] = os.environ.get(COMPILE_THREADS_ENV, SHARED_COMPILE_THREADS)
        # a candidate's blocks were crawled offline (crawl_transformers._offline): none fetches from the hub here
        env["HF_HUB_OFFLINE"] = os.environ.get("HF_HUB_OFFLINE", "1")
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        return env

    def _ensure(self, start_s: float) -> Process:
        if self._proc is not None and self._served >= self.limits.recycle_every:
            self.close()
        if self._proc is None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            proc = Process(WORKER_MODULE, cwd=self.workdir, log=self.workdir / "worker.log",
                           memory_bytes=self.limits.memory_bytes, env=self._env())
            try:
                proc.recv(start_s)
            except ChildFailed:
                proc.close()
                raise
            self.start_seconds += time.perf_counter() - t
            self._proc, self._served = proc, 0
        return self._proc

    def request(self, message: dict, timeout_s: float) -> dict:
        """The worker's reply; a dead or hung child becomes a failed reply and a fresh child next time.
        A child that must start first gets at most `timeout_s` for that too (a run's hard stop)."""
        try:
            proc = self._ensure(min(self.limits.start_s, timeout_s))
            reply = proc.request(message, timeout_s)
        except ChildFailed as e:
            self.close()
            return {"ok": False, "reason": f"worker {e}", "crashed": True}
        if "trace" in reply:  # an error we did not foresee: do not trust this child's state
            self.close()
        return reply

    @property
    def alive(self) -> bool:
        """Whether the warm child is up (it keeps the last candidate's state)."""
        return self._proc is not None

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
    """The execution filters of one candidate, with the run's window and memory budget. `stop_at`
    (epoch seconds): the run's hard stop; a candidate still running then is cancelled (its child
    is killed, and it gets no verdict: a resumed run executes it again)."""

    def __init__(self, config: "SynthConfig", memory_budget: int, stop_at: float | None = None):
        self.config, self.window, self.memory_budget = config, config.resolved_window(), memory_budget
        # a task whose weights exceed the run's limit, or alone fill its share, is rejected ("memory")
        self.max_weights = min(memory_budget, config.max_weights_bytes)
        self.weights = 0  # the candidate's weights at its current size (the worker's last reply), bytes
        self.stop_at = stop_at
        self.alone = False  # on the GPU alone: after an out-of-memory error at the current size
        # On a GPU the size search's timing runs beside other workers' runs (synth/worker.py); on the CPU backend
        # the CPU is the device they would disturb
        self.beside = config.device == "cuda" and not config.quiet_timing

    def execute(self, cand: Candidate, rec: dict, executor: Executor) -> Outcome:
        started = executor.start_seconds
        rec["rescales"] = 0
        try:
            outcome = self._size_search(cand, rec, executor)
            if outcome is None:
                rec["batch"] = cand.program.batch if cand.program else None
                outcome = self._compile(rec, executor)
        finally:
            rec["seconds"]["start"] = executor.start_seconds - started
            if cand.program is not None and cand.program.elems_per_sample:
                rec["memory_estimate_mb"] = round(_footprint(cand.program, self.weights) / 2**20, 1)
        return outcome

    def _request(self, executor: Executor, rec: dict, message: dict, limit_s: float) -> dict | None:
        """The worker's reply (its seconds and peak memory added to `rec`), or None when the run's
        hard stop came first."""
        timeout = limit_s
        if self.stop_at is not None:
            timeout = min(limit_s, self.stop_at - time.time())
            if timeout <= 0:
                return None
        reply = executor.request({**message, "alone": self.alone, "beside": self.beside}, timeout)
        add_seconds(rec["seconds"], reply.get("seconds", {}))
        if reply.get("alone_s"):  # by request: held alone, which every other worker of the GPU waited for
            add_seconds(rec.setdefault("alone_s", {}), {message["op"]: reply["alone_s"]})
        if "weights_bytes" in reply:
            self.weights = reply["weights_bytes"]
            rec["weights_mb"] = round(self.weights / 2**20, 1)
        if "peak_mb" in reply:
            rec["gpu_peak_mb"] = max(rec.get("gpu_peak_mb", 0.0), reply["peak_mb"])
        if not reply.get("ok") and self.stop_at is not None and time.time() >= self.stop_at:
            return None  # killed at the hard stop (or failed just then): redone on resume, never a verdict
        if not reply.get("ok") and _device_broken(reply):
            executor.close()  # its CUDA context is unusable: the next candidate gets a fresh child
        return reply

    def _size_search(self, cand: Candidate, rec: dict, executor: Executor) -> Outcome | None:
        """Eager runs at sizes chosen to land the eager time in the window, then the checks at the size it
        landed at: None when it landed there and passed them, else the rejection."""
        cfg = self.config
        while True:
            reply = self._request(executor, rec, {"op": "eager", "code": cand.code, "device": cfg.device,
                                                  "plan": SIZE_SEARCH_PLAN.to_dict(),
                                                  "max_weights_bytes": self.max_weights}, cfg.limits.eager_s)
            if reply is not None and reply.get("ok"):
                ms = reply["eager_ms"]
                rec["eager_ms"] = ms
                rec.setdefault("sizes", []).append([*(cand.program.dims if cand.program else ()), round(ms, 4)])
                if not self.window.contains(ms):
                    resized = self._resized(cand, ms)
                    if resized is None or rec["rescales"] >= cfg.max_rescales:
                        return Outcome("window", f"eager {ms:.3g} ms outside [{self.window.low_ms:g}, "
                                                 f"{self.window.high_ms:g}]")
                    cand.program = resized
                    cand.code = resized.source()
                    rec["rescales"] += 1
                    continue
                # the size it ships at: determinism and RNG use
                reply = self._request(executor, rec, {"op": "checks", "atol": cfg.atol, "rtol": cfg.rtol},
                                      cfg.limits.eager_s)
                if reply is not None and reply.get("ok"):
                    rec["repeat_apart"] = reply["repeat_apart"]  # 0.0: two runs agreed bit for bit
                    return None
            if reply is None:
                return CANCELLED
            if not _out_of_memory(reply):  # the eager step's or the checks' failure
                return Outcome(reply.get("filter", "eager"), str(reply.get("reason", ""))[:300])
            rejected = self._after_out_of_memory(cand, rec, reply, executor)
            if rejected is not None:
                return rejected
            # the size again (alone), or smaller

    def _after_out_of_memory(self, cand: Candidate, rec: dict, reply: dict, executor: Executor) -> Outcome | None:
        """Workers share a GPU's memory, so an out-of-memory error is first blamed on the others: the
        candidate runs again at the same size, alone on the GPU. Only when it fails alone is it too
        big: then it runs at a quarter of the batch (at most max_rescales times, a budget of its own,
        apart from the window's), the size search kept under half the size that failed. None: run
        it again; else the rejection."""
        executor.close()  # a fresh child: all its memory goes back, and a CUDA error can leave a context unusable
        rec["oom"] = rec.get("oom", 0) + 1
        if not self.alone:
            self.alone = True
            return None
        p, shrinks = cand.program, rec.get("oom_shrinks", 0)
        if p is None or p.batch <= 1 or shrinks >= self.config.max_rescales:
            return Outcome("eager", f"out of memory alone on the GPU: {reply.get('reason', '')}"[:300])
        # half the batch's share of what failed (the weights stay as they are)
        self.memory_budget = min(self.memory_budget, self.weights + max(_footprint(p) // 2, 1))
        smaller = p.with_batch(max(1, p.batch // 4))
        cand.program, cand.code = smaller, smaller.source()
        rec["oom_shrinks"] = shrinks + 1
        self.alone = False
        return None

    def _compile(self, rec: dict, executor: Executor) -> Outcome:
        """torch.compile, compared with eager, and both timed as the harness times them. An
        out-of-memory error is retried once alone, in the same child (it keeps the candidate)."""
        cfg = self.config
        message = {"op": "compile", "plan": cfg.timing.to_dict(), "atol": cfg.atol, "rtol": cfg.rtol}
        reply = self._request(executor, rec, message, cfg.limits.compile_s)
        if reply is not None and _out_of_memory(reply) and not self.alone and executor.alive:
            rec["oom"] = rec.get("oom", 0) + 1
            self.alone = True
            reply = self._request(executor, rec, message, cfg.limits.compile_s)
        if reply is None:
            return CANCELLED
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

    def _resized(self, cand: Candidate, ms: float):
        """The program at the size that should land in the window (time ~ batch x spatial size):
        the batch first, the spatial sizes for what the batch cannot do; None when nothing moves."""
        p = cand.program
        if p is None:
            return None
        per_sample = max(p.elems_per_sample, 1) * 4
        room = max(0, self.memory_budget - self.weights)  # what the batch's inputs and intermediates may take
        max_batch = max(2, min(MAX_BATCH, room // per_sample))
        batch = scaled_batch(p.batch, ms, self.window, max_batch) or p.batch
        left = self.window.target_ms / max(ms, 1e-6) * p.batch / batch
        q = p.with_batch(batch)
        if not 0.7 < left < 1.4:
            q = q.with_spatial(left)
            if q.elems_per_sample * 4 * batch > room:
                q = p.with_batch(batch)
        return None if q.dims == p.dims else q


# A GPU run's children draw weights and trace on the host, six or more beside each other: with torch's default (one
# thread a core each, 16 on an H200's host) a candidate without an nn.Bilinear took 0.25 s of build and 1.69 s of
# compile; with two, 0.11 s and 1.27 s (two fresh H200s, six workers, 2026-11-29). On the CPU backend the candidates'
# runs and timings are the host's: its children keep torch's default.
GPU_CHILD_THREADS = 2


# The size search's timing only chooses a size for a window 100x wide (the set's figures are the baselines', timed
# with the run's plan in `compile`): a few calls do. With the run's plan (0.3 s of calls, at least 10) it took 2.2 s
# of a candidate's 11.4 s of worker time on an H200, 2026-11-28, and 529 of 834 accepted tasks were timed three times.
SIZE_SEARCH_PLAN = TimingPlan(min_runs=3, max_runs=10, budget_s=0.03, warmup_s=0.0, min_warmup=1)


# The size search's largest batch (the memory budget bounds it too). A layout with no spatial size (NF: a Linear's
# rows of features) has only the batch to grow: at 1 << 16 rows, 68 of 311 GEMM-led candidates and 18 of 36 loss-led
# ones of the H100/H200 set (benchmarks/synth_h100_1k, 2026-11-28) stayed under 1 ms after both rescales, with
# estimates of 0.1-0.7 GB of an 8 GB budget.
MAX_BATCH = 1 << 20


# A candidate that the run's hard stop cut short: it gets no journal line, so a resume redoes it.
CANCELLED = Outcome("cancelled", "the run's time limit came while it ran")


def _out_of_memory(reply: dict) -> bool:
    """A CUDA out-of-memory error: PyTorch's allocator's (OutOfMemoryError), CUDA's own (AcceleratorError: CUDA
    error: out of memory, from a library's workspace, say) or cuBLAS's (CUBLAS_STATUS_ALLOC_FAILED)."""
    reason = str(reply.get("reason", "")).lower()
    return not reply.get("ok") and ("out of memory" in reason or "alloc_failed" in reason)


# A failure that leaves the child's CUDA context unusable (an error the device raised, sticky for the process): every
# later request of that child would fail too, and be filed against candidates that did nothing wrong.
_BROKEN_DEVICE = ("cuda error", "acceleratorerror", "device-side assert", "illegal memory access",
                  "illegal address", "unspecified launch failure")


def _device_broken(reply: dict) -> bool:
    """A failed reply whose error the device raised (out of memory aside: not sticky, and retried in the child)."""
    reason = str(reply.get("reason", "")).lower()
    return any(s in reason for s in _BROKEN_DEVICE) and not _out_of_memory(reply)


def _footprint(p, weights: int = 0) -> int:
    """The size search's estimate of a program's memory: its weights (bytes, as the worker counted them)
    and every intermediate of the batch, fp32."""
    return weights + p.elems_per_sample * 4 * p.batch


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
