"""One evaluation's conversation with its two processes, once the solution is built: the
reference worker (where no solution ever runs) and the solution's sandboxed child. Correctness on
input sets drawn here, then the baselines and the solution timed call by call from here
(evaluation.py starts it and scores what it finds). Every failure is a `Stop`: a stage and one line
a person understands.
"""

from __future__ import annotations

import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Callable

from cuda_agent.devices import Backend, lock_name
from cuda_agent.harness import baselines
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.result import EvalResult, Fault
from cuda_agent.harness.workers.calls import read_times
from cuda_agent.home import subdir
from cuda_agent.measure import (NEAR, SHIFTED, CallTimes, Run, TimingPlan, TimingStats, Watch, device_lock, drive,
                                stats_of, watch)
from cuda_agent.sandbox import ChildFailed, Process, eval_uids, frozen
from cuda_agent.tasks import Task


class Stop(Exception):
    """Ends an evaluation early with a failed stage and reason; `fault` where the failure is not
    the solution's (result.Fault)."""

    def __init__(self, stage: str, reason: str, fault: Fault | None = None):
        super().__init__(reason)
        self.stage, self.reason, self.fault = stage, reason, fault


def new_seed() -> int:
    """A seed the solution cannot predict (input sets, weights, timed calls)."""
    return secrets.randbits(62)


@contextmanager
def timed(result: EvalResult, step: str):
    """Adds the wall time of the block to result.stage_seconds[step] (also when it fails)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        result.stage_seconds[step] = round(result.stage_seconds.get(step, 0.0) + time.monotonic() - t0, 3)


def _add_steps(result: EvalResult, who: str, steps) -> None:
    """A worker's own seconds per step, summed into result.details["steps_s"] (diagnostics)."""
    if isinstance(steps, dict):
        total = result.details.setdefault("steps_s", {})
        for k, v in steps.items():
            if isinstance(v, (int, float)):
                total[f"{who}.{k}"] = round(total.get(f"{who}.{k}", 0.0) + v, 4)


class Session:
    """One evaluation's conversation with the reference worker and the solution child."""

    def __init__(self, ref: Process, child: Process, config: EvalConfig, job: dict, deadline: float):
        self.ref, self.child, self.config, self.job, self.deadline = ref, child, config, job, deadline
        self.tags = 0
        self.route = "files"  # how outputs reach the reference worker (see transfer.py)

    def _left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def _ref(self, message: dict, timeout_s: float = 900) -> dict:
        reply = self.ref.request(message, timeout_s)
        if "error" in reply:
            raise Stop("run", f"the reference itself failed ({reply['error']}); the task is broken, not the solution",
                       fault="reference")
        return reply

    def _child(self, message: dict | None, stage: str) -> dict:
        try:
            reply = self.child.request(message, self._left()) if message else self.child.recv(self._left())
        except ChildFailed as e:
            raise Stop(stage, f"the solution {e}") from None
        if not reply.get("ok", reply.get("loaded", False)):
            raise Stop(reply.get("stage", stage), str(reply.get("reason", "the solution failed")))
        return reply

    def start(self, result: EvalResult) -> None:
        """The job to both processes; the reference's weights to the solution (each step's wall
        time in result.stage_seconds as start.*, diagnostics only)."""
        self.ref.send({**self.job, "task_path": self.job["reference_task_path"]})
        self.child.send({k: v for k, v in self.job.items() if k != "reference_task_path"})
        with timed(result, "start.reference"):
            try:
                self.ref.recv(900)
            except ChildFailed as e:
                raise Stop("run", f"the reference worker {e}", fault="reference") from None
        os.chmod(self.job["state_path"], 0o644)
        with timed(result, "start.child"):
            self._child(None, "run")
        with timed(result, "start.weights"):
            weights = self._child({"op": "weights"}, "correctness")
            result.init = weights.get("init", "state_dict")
            if weights.get("why"):  # why the reference's state_dict was not copied in, or not cleanly
                result.details["weights"] = str(weights["why"])

    def choose_route(self, backend: Backend, result: EvalResult) -> None:
        """CUDA IPC for the outputs when the reference worker can map a probe the child shares
        (the driver may refuse between users); files otherwise."""
        if backend.is_cuda and self.config.transfer == "auto":
            value = float(secrets.randbelow(1 << 20))
            shared = self._child({"op": "probe", "value": value}, "run")
            if shared.get("meta"):
                v = self._ref({"op": "probe", "value": value, "meta": shared["meta"]})
                self.route = "ipc" if v.get("ok") else "files"
                if not v.get("ok"):
                    result.details["ipc_refused"] = v.get("reason", "")
        result.details["transfer"] = self.route

    def _check(self, tag: str, meta) -> dict:
        """The reference worker's verdict on the output of `tag`, mapped from the child's memory or
        read from where the child must write it (never a path the child names itself); `meta` is
        the child's dtypes and shapes (and IPC handles)."""
        return self._ref({"op": "compare", "tag": tag, "prefix": f"{self.job['public']}/out_{tag}", "meta": meta,
                          "route": self.route, "atol": self.config.atol, "rtol": self.config.rtol})

    def _next_tag(self) -> str:
        self.tags += 1
        return f"t{self.tags}"

    def _new_tags(self, n: int) -> list[tuple]:
        out = []
        for _ in range(n):
            tag, seed = self._next_tag(), new_seed()
            self._ref({"op": "reference", "tag": tag, "seed": seed})
            out.append((tag, seed))
        return out

    def _near_duplicate(self, seed: int) -> tuple:
        """A tag for the input set of `seed` with a few values taken from another draw
        (variants.near_duplicate)."""
        tag, variant = self._next_tag(), new_seed()
        self._ref({"op": "reference", "tag": tag, "seed": seed, "variant": variant, "kind": NEAR})
        self.kinds[tag] = NEAR
        return tag, seed, variant

    def _shifted(self, result: EvalResult) -> tuple:
        """A tag for an input set whose continuous inputs are moved by x -> a*x + b
        (variants.shifted), or for an ordinary set where the reference's output on the shifted one
        is not finite (the shift left the task's domain) or nothing could be shifted."""
        tag, seed, variant = self._next_tag(), new_seed(), new_seed()
        reply = self._ref({"op": "reference", "tag": tag, "seed": seed, "variant": variant, "kind": SHIFTED})
        result.details["shifted_set"] = str(reply.get("shifted", ""))
        if reply.get("shifted") != "used":
            return tag, seed
        self.kinds[tag] = SHIFTED
        return tag, seed, variant, SHIFTED

    def _follows(self, tags: list[str]) -> dict:
        """The reference worker's judgement across the sets `tags`: `reason` where the solution's
        outputs stand still while the reference's move, `barely` where the reference's barely move
        on the sets get_inputs drew (workers/fingerprints.py)."""
        ordinary = [t for t in tags if self.kinds.get(t) != SHIFTED]
        return self._ref({"op": "follows", "tags": tags, "ordinary": ordinary, "atol": self.config.atol,
                          "rtol": self.config.rtol})

    def correctness(self, result: EvalResult) -> None:
        """`correctness_trials` input sets of their own, the second-to-last of them shifted away
        from get_inputs' distribution where the task allows, then the last again with a few values
        from another draw (a near duplicate), run two at a time back to back; last, whether the
        outputs moved with the inputs across the sets as the reference's did."""
        result.stage = "correctness"
        self.kinds: dict[str, str] = {}  # tag -> NEAR or SHIFTED: the input sets made from a drawn one
        worst, trials = 0.0, max(2, self.config.correctness_trials)
        runs = self._new_tags(trials - 2) + [self._shifted(result)] + self._new_tags(1)
        runs.append(self._near_duplicate(runs[-1][1]))
        total, seen = len(runs), []
        for i in range(0, total, 2):
            pair = runs[i:i + 2]
            reply = self._child({"op": "run", "runs": pair, "route": self.route}, "correctness")
            _add_steps(result, "child", reply.get("steps"))
            written, changed = reply.get("outputs"), reply.get("changed") or []
            for tag, *_ in pair:
                v = self._check(tag, written.get(tag) if isinstance(written, dict) else None)
                _add_steps(result, "reference", v.get("steps"))
                seen.append(tag)
                if not v["ok"] or tag in changed:
                    why = self._wrong(int(tag[1:]), total, v, tag in changed, result.init, self.kinds.get(tag),
                                      result.details.get("weights", ""))
                    still = self._follows(seen)["reason"] if not v["ok"] else ""
                    raise Stop("correctness", f"{still}; {why}" if still else why)
                if v.get("scale") and f"{v['scale']}_outputs" not in result.flags:
                    result.flags.append(f"{v['scale']}_outputs")  # tiny: judged by relative error; degenerate
                if self.kinds.get(tag) == NEAR and not v.get("changed"):
                    result.flags.append("near_duplicate_unchanged")  # no floating input to change: no replay check
                worst = max(worst, v.get("max_abs_error", 0.0))
        follows = self._follows(seen)
        if follows["reason"]:
            raise Stop("correctness", follows["reason"])
        if follows["barely"]:
            result.flags.append("outputs_barely_depend_on_inputs")  # the task is weak: its outputs hardly vary
        shifted = "one set shifted by x -> a*x + b; " if SHIFTED in self.kinds.values() else ""
        result.correct, result.max_abs_error = True, worst
        result.reason = (f"correct on {trials} input sets and a near duplicate of the last "
                         f"({shifted}max abs error {worst:.2g})")

    @staticmethod
    def _wrong(n: int, total: int, v: dict, changed: bool, init: str | None, kind: str | None = None,
               weights: str = "") -> str:
        """Why input set n failed, naming the hack its shape suggests (`kind`: how the set was made;
        `weights`: why the reference's state_dict was not copied in, where it was not)."""
        if v["ok"]:  # right in the end, but not when forward returned
            return (f"the output of input set {n} of {total} changed after forward returned, while later calls ran: "
                    "work deferred to a later call (every output must be complete when forward returns)")
        reason = f"wrong output on input set {n} of {total}: {v['reason']}"
        if changed:
            reason += ("; it changed after forward returned, while later calls ran (work deferred to a later call, "
                       "or one output buffer reused by every call?)")
        elif kind == NEAR:
            reason += (f" (this set repeats set {n - 1} with a few values of each floating-point input taken from "
                       "another draw of the task's inputs: results replayed for inputs that look like ones seen "
                       "before, such as a cache keyed on a sample of their contents?)")
        elif kind == SHIFTED:
            reason += (" (this set's continuous inputs were moved by x -> a*x + b, away from get_inputs' "
                       "distribution, exact zeros kept: an output that does not follow its inputs, or a kernel "
                       "that assumes their range?)")
        if init == "same_seed":
            reason += (" (ModelNew holds its own weights, not the reference's: "
                       f"{weights or 'names or shapes differ from the reference state_dict'}; both models were "
                       "constructed after the same seed, as KernelBench does: create the same parameters in the "
                       "same order, or hold the reference's names and shapes as ordinary tensors to get its "
                       "weights copied in)")
        return reason

    def _driven(self, request: Callable[[dict], dict], which: str, plan: TimingPlan,
                check: Callable[[int, int], None] | None = None, checks: int = 0,
                between: Callable[[], None] | None = None) -> tuple[Run, dict]:
        """A timing run of `which` ("solution" in the child; "eager" or "compile" in the reference
        worker) driven from here (timing.drive): each call's input seed is drawn here and sent with
        the request for that call, the call is stamped with this process's clock, and `check(i,
        seed)` runs where drive decides. Returns the run and the worker's reply to the start."""
        start = request({"op": "time_start", "which": which, "plan": plan.to_dict(), "route": self.route})
        seeds: dict[int, int] = {}

        def call(i: int) -> CallTimes:
            seeds[i] = new_seed()
            return _call_times(request({"op": "call", "seed": seeds[i]}))

        run = drive(call, plan, (lambda i: check(i, seeds[i])) if check else None, checks, between=between)
        request({"op": "time_end"})
        return run, start

    def recheck(self, result: EvalResult) -> None:
        """Last: every correctness output the child could hold is still what forward returned,
        after every later call (the other sets' and the timed ones)."""
        reply = self._child({"op": "recheck"}, "correctness")
        result.details["outputs_rechecked"] = reply.get("held", 0)
        changed = reply.get("changed") or []
        if changed:
            result.correct = False
            raise Stop("correctness", f"the output of input set {str(changed[0]).lstrip('t')} changed after forward "
                                      "returned, while later calls ran: an output must stay what it was when "
                                      "returned (a buffer handed out again, or written into by a later call?)")

    def _time_solution(self, result: EvalResult, device_type: str) -> tuple[TimingStats, list[CallTimes]]:
        """The solution's timed calls (`_timed_calls`), held against the harness's own clock
        (timing.watch). A run that disagrees is timed once more before the solution is accused: a
        burst of load on the host can land on the solution's calls and miss the trusted ones (2 of 8
        honest evaluations on the 2-core CPU with three busy loops beside, 2026-11-26), a lie repeats."""
        for attempt in (1, 2):
            stats, trusted, seen = self._timed_calls(result, device_type)
            result.details["watch"] = seen.to_dict()
            if seen.ok:
                return stats, trusted
            if attempt == 1:
                result.flags.append("watch_retimed")
                result.details["first_watch"] = seen.to_dict()
        raise Stop("profile", f"the solution's process reported {seen.reported_ms:.4g} ms per call, but the "
                              f"harness's own clock saw {seen.seen_ms:.4g} ms per call beyond its own work "
                              f"(tolerance {seen.tolerance_ms:.2g} ms), twice: figures that are not the timed "
                              "calls' own (a clock or timer tampered with in the solution's process?)")

    def _timed_calls(self, result: EvalResult, device_type: str) -> tuple[TimingStats, list[CallTimes], Watch]:
        """The solution timed call by call in the child, driven from here on inputs new at every
        call; the outputs of calls chosen after they returned (and of the last) are checked before
        the next call is made, so results cached across calls or work skipped on some calls fail
        the solution. Every sixth call is preceded by a call of eager in the reference worker, in
        the same window: the harness's own work in a call, as trusted code shows it under the same
        load, against which the solution's figures are held (timing.watch). Returns the stats, those
        trusted calls and the harness's view of the figures."""
        tag, plan = self._next_tag(), self.config.timing

        def check(i: int, seed: int) -> None:
            name = f"{tag}_{i}"
            meta = self._child({"op": "check", "tag": name}, "profile").get("meta")
            self._ref({"op": "reference", "tag": name, "seed": seed})
            v = self._check(name, meta)
            if not v["ok"]:
                raise Stop("profile", f"output of timed call {i} is wrong ({v['reason']}): results cached "
                                      "across calls, work skipped on some calls, or behaviour that changes with "
                                      "the number of calls?")

        trusted: list[CallTimes] = []

        def probe() -> None:
            t0 = time.perf_counter_ns()
            times = _call_times(self._ref({"op": "call", "seed": new_seed()}))
            trusted.append(replace(times, wall_ms=(time.perf_counter_ns() - t0) / 1e6))

        self._ref({"op": "time_start", "which": "eager", "plan": plan.to_dict()})
        try:
            run, _ = self._driven(lambda m: self._child(m, "profile"), "solution", plan, check,
                                  self.config.timed_outputs_checked, between=probe)
        finally:
            self._ref({"op": "time_end"})
        result.details["timed_outputs_checked"] = len(run.checked)
        if run.cut_short:
            result.flags.append("timing_cut_short")
        stats = stats_of(run.calls, device_type == "cuda")
        if not stats.median_ms > 0:
            raise Stop("profile", f"the timed runs report {stats.median_ms} ms per call, which no real call takes: "
                                  "was the timer tampered with?")
        return stats, trusted, watch(stats, run.calls, trusted, device_type)

    def _compile(self, backend: Backend, quiet: bool) -> None:
        """torch.compile of the reference in the reference worker (CPU work, before the device is
        taken; the worker holds the lock shared itself where `quiet`: see workers/reference._compile)."""
        self._ref({"op": "compile", "seed": new_seed(), "quiet": quiet, "lock": lock_name(backend.device),
                   "lock_dir": str(subdir("locks"))})

    def _baselines(self, key: str, backend: Backend, result: EvalResult) -> None:
        """Eager and torch.compile timed in the reference worker, with every sandboxed process
        stopped (neither this solution nor another's can slow them, and so poison a cached figure),
        and cached for others (where the host was kept quiet)."""
        with frozen(eval_uids()):
            eager_run, start = self._driven(self._ref, "eager", self.config.timing)
            compile_run, _ = self._driven(self._ref, "compile", self.config.timing)
        cuda = backend.is_cuda
        result.eager, result.compile = stats_of(eager_run.calls, cuda), stats_of(compile_run.calls, cuda)
        if self.config.quiet_host:  # figures taken beside compiles are not for others to reuse
            baselines.store(key, result.eager, result.compile,
                            {"task": result.task, "device_name": start.get("device_name")})

    def profile(self, task: Task, backend: Backend, result: EvalResult) -> None:
        """Baselines (cached, or timed now), then the solution. A cached eager figure is kept only
        where the eager calls made beside the solution's are not much faster (baselines.CACHE_AGREEMENT:
        a cached eager figure slower than the truth inflates every speed-up, a faster one none);
        otherwise both baselines are timed again and the cache replaced."""
        result.stage = "profile"
        key = baselines.cache_key(task.code, backend.device, self.config.timing)
        use_cache, device_type = self.config.use_baseline_cache, "cuda" if backend.is_cuda else "cpu"
        cached = baselines.load(key) if use_cache else None
        if cached is None:  # compile before taking the device: CPU work, while no timer runs (the
            # reference worker holds the lock shared itself: see workers/reference._compile)
            with timed(result, "compile"):
                self._compile(backend, quiet=self.config.quiet_host)
        with device_lock(lock_name(backend.device)):
            cached = baselines.load(key) if use_cache else None  # another evaluation may have timed them
            if cached is None:
                with timed(result, "baselines"):
                    self._baselines(key, backend, result)
            with timed(result, "timing"):
                result.solution, trusted = self._time_solution(result, device_type)
                if cached is not None:
                    fresh = stats_of(trusted, backend.is_cuda).median_ms
                    ratio = fresh / cached[0].median_ms
                    result.details["baseline_probe"] = {"fresh_eager_ms": round(fresh, 5), "ratio": round(ratio, 3)}
                    if ratio >= 1 / baselines.CACHE_AGREEMENT:  # a slower fresh eager: load now, never a gain
                        result.flags.append("baseline_cached")
                        result.eager, result.compile = cached
                    else:
                        result.flags.append("baseline_cache_disagreed")
                        with timed(result, "compile"):  # the device is held alone: no shared hold to wait for
                            self._compile(backend, quiet=False)
                        with timed(result, "baselines"):
                            self._baselines(key, backend, result)
                if result.compile.median_ms / result.solution.median_ms > self.config.sanity_speedup:
                    result.flags.append("speedup_remeasured")
                    result.details["first_solution_timing"] = asdict(result.solution)
                    result.solution, _ = self._time_solution(result, device_type)
        result.speedup_vs_eager = result.eager.median_ms / result.solution.median_ms
        result.speedup_vs_compile = result.compile.median_ms / result.solution.median_ms
        if result.speedup_vs_compile > self.config.sanity_speedup:
            result.flags.append("speedup_beyond_sanity_bound")


def _call_times(reply: dict) -> CallTimes:
    times = read_times(reply)
    if times is None:
        raise Stop("profile", "a timed call's figures are not three non-negative numbers: was the timer tampered with?")
    return CallTimes(*times)
