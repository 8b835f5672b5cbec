"""The profile stage of one evaluation: the solution and its baselines timed paired
(measure.paired), driven from here over the two processes of session.py, and the speed-ups taken
from the paired figures.

What runs where:
- here, trusted: the clock, the loop (`measure.drive_paired`), every call's seed, the statistics,
  and the watch on the solution's figures (`measure.watch`, with the eager calls of the same run
  as the trusted ones);
- the reference worker, trusted: the eager and torch.compile calls, each timed by its CallTimer;
- the solution's child: the solution's calls, each timed by its CallTimer. It is sent one call at
  a time and never learns a figure but its own.
This process holds the device's lock alone for the whole run (its start and CUDA graph capture, where
no figure is taken, beside other evaluations' runs, the lock held shared); neither worker takes the lock
while it times, so the two can never wait for each other. The baselines' windows of each round run with
every process of the solution's user stopped (sandbox.Freezer): nothing the solution left running
can slow them, and so inflate its speed-up. Every process of the other sandbox users (other evaluations'
children, agents' shells) that holds the timed GPU stays stopped until the run ends (sandbox.bystanders).

The judge's cached baselines are recorded beside the paired figures (a drift check; never the
reward's), stored where there were none, and replaced where the paired eager figure is faster than
the cached one by more than baselines.CACHE_AGREEMENT (a figure poisoned when it was taken).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import asdict, replace
from typing import Callable, Iterator

from cuda_agent.devices import Backend, lock_name
from cuda_agent.harness import baselines
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.replays import capture, short_of_memory, wrong_output
from cuda_agent.harness.result import EvalResult
from cuda_agent.harness.session import Session, Stop, add_steps, new_seed, timed
from cuda_agent.harness.workers.calls import read_prep, read_times
from cuda_agent.home import locks, subdir
from cuda_agent.measure import (CallTimes, PairedRun, PairedTiming, Side, TimingStats, Watch, call_seed, calls_per,
                                drive_paired, side_stats, watch)
from cuda_agent.sandbox import GPU_FILES, Bystanders, ContextWatch, Freezer, FrozenBlock
from cuda_agent.tasks import Task

BASELINES = ("eager", "compile")
SOLUTION = "solution"


def profile(session: Session, task: Task, backend: Backend, result: EvalResult,
            last: Callable[[], None] | None = None) -> None:
    """torch.compile of the reference (CPU work, before the device is taken), then the paired run: started and
    captured beside other evaluations' runs (the lock shared: stage `capture`), timed with the device held alone
    (stage `timing`); a speed-up past the sanity bound is measured once more, inside the alone hold. `last`: what
    the evaluation asks of the child after its timing (the recheck), asked before the device is let go:
    another lock taken for it would wait behind the next evaluation's whole timing (2x H200, 2026-11-28:
    `wait` 1.2 s an evaluation, 3 evaluators a GPU), for a round trip of milliseconds."""
    result.stage = "profile"
    # the reference worker holds the lock shared itself; the solution's processes stopped meanwhile, so that none slows
    # the autotuning whose choices the torch.compile baseline keeps (its own speed-up vs compile would gain)
    with timed(result, "compile"), session.off_clock(), _solution_stopped(session, result):
        done = session.ask_reference({"op": "compile", "seed": new_seed(), "quiet": session.config.quiet_host,
                                      "lock": lock_name(backend.device), "lock_dir": str(locks()),
                                      "off_lock": session.config.compile_lets_go(backend.is_cuda),
                                      "turn_dir": str(subdir("locks"))})
    result.details["compile_graphs"] = done.get("graphs")  # 0: torch's cache held the task (a kept reference worker)
    add_steps(result, "reference", done.get("steps"))   # its parts: warm-up, the task's turn, the lock, the compile
    with ExitStack() as held:
        device = _Device(session, result, backend.device, held)
        paired = _watched_run(session, result, backend.is_cuda, device)
        if paired.ratios["compile"].value > session.config.sanity_speedup:
            result.flags.append("speedup_remeasured")
            result.details["first_solution_timing"] = asdict(result.solution)
            result.details["first_paired"] = paired.to_dict()
            result.details["first_timing_split_ms"] = result.details.get("timing_split_ms")
            paired = _watched_run(session, result, backend.is_cuda, device)
        if last is not None:
            last()
    if not result.solution.median_ms > 0:
        raise Stop("profile", f"the timed runs report {result.solution.median_ms} ms per call, which no real call "
                              "takes: was the timer tampered with?")
    _against_cache(task, backend, session.config, result, paired)
    if "solution_not_captured" in result.flags:
        result.reason = f"{result.reason}; {result.details['graph']}"
    result.paired = paired
    result.speedup_vs_eager = paired.ratios["eager"].value
    result.speedup_vs_compile = paired.ratios["compile"].value
    if result.speedup_vs_compile > session.config.sanity_speedup:
        result.flags.append("speedup_beyond_sanity_bound")


class _Device:
    """The device's lock through one profile: shared while a run is started and captured (`shared()`: beside other
    evaluations' runs; no figure is taken then), alone from a run's first timed block to the profile's end
    (`alone()`, taken once: a second run, where one is needed, and the recheck stay inside it). The stage `timing` is
    the GPU held alone; `wait_alone` the wait for it, behind the shared holds of other evaluations' runs and compiles
    (outside every stage before it had one of its own: a fresh H100, 2026-11-28, evaluations of 12 s whose stages
    summed to 2 s while other workers' first compiles held the lock shared). The start and the capture were held
    alone until 2026-11-29: 0.11-0.18 s of an evaluation's 1.3 s alone (H200, 2026-11-28)."""

    def __init__(self, session: Session, result: EvalResult, device: str, held: ExitStack) -> None:
        self.session, self.result, self.device, self.held = session, result, device, held
        self.taken = False

    def shared(self, stack: ExitStack) -> None:
        """The lock shared, into `stack` (inside the alone hold, once it is taken: at once)."""
        self.session.hold_device(stack, self.result, self.device)

    def alone(self) -> None:
        if not self.taken:
            self.session.hold_device(self.held, self.result, self.device, shared=False)
            self.taken = True


@contextmanager
def _solution_stopped(session: Session, result: EvalResult) -> Iterator[None]:
    """Every process of the solution's user stopped for the block (nothing is asked of it meanwhile), unless the user
    is shared with other evaluations' children, who may be in a stage of their own. A solution whose processes ran
    in the block after all (a timer of its own that sends SIGCONT) fails: the block is the reference's compile,
    whose autotuning a process beside it could slow into a slower torch.compile baseline (no other evaluation's
    stop continues them: sandbox/stop_holds.py)."""
    uid = _uid_of(session.child.proc.pid)
    if uid is None or "shared_sandbox_user" in result.flags:
        yield
        return
    with Freezer([uid], gpu_files=()) as freezer:
        with freezer.frozen() as block:
            yield
    if not block.quiet:
        raise Stop("profile", block.why_not_quiet("while its baselines were compiled and their kernels autotuned"),
                   fault=block.fault)


def _watched_run(session: Session, result: EvalResult, cuda: bool, device: _Device) -> PairedTiming:
    """A paired run whose solution figures the harness's own clock confirms (measure.watch). A run
    that disagrees is timed once more before the solution is accused: a burst of load on the host
    can land on the solution's calls and miss the trusted ones (2 of 8 honest evaluations on the
    2-core CPU with three busy loops beside, 2026-11-26); a lie repeats."""
    for attempt in (1, 2):
        run, (calls, ours) = _paired_run(session, result, cuda, device)
        replays = side_stats(run, SOLUTION, cuda)   # the figures as the harness's clock saw each request
        result.details["timing_split_ms"] = run.spent_ms(cuda)
        seen = watch(replays, run.calls(SOLUTION), run.calls("eager"), "cuda" if cuda else "cpu")
        result.details["watch"] = seen.to_dict()
        if seen.ok:
            alone = bool(calls) and not ours   # the solution's calls timed alone beside the baselines' graphs
            per = calls_per(run, calls, alone)
            stats = {side: side_stats(run, side, cuda, per=per[side]) for side in run.windows}
            result.eager, result.compile, result.solution = stats["eager"], stats["compile"], stats[SOLUTION]
            result.details["timed_outputs_checked"] = len(run.checked)
            if run.cut_short:
                result.flags.append("timing_cut_short")
            return PairedTiming.of(run, session.config.timing, cuda, graph_calls=calls, solution_per_call=alone)
        if attempt == 1:
            result.flags.append("watch_retimed")
            result.details["first_watch"] = seen.to_dict()
    raise Stop("profile", _lie(seen))


def _lie(seen: Watch) -> str:
    return (f"the solution's process reported {seen.reported_ms:.4g} ms per call, but the harness's own clock saw "
            f"{seen.seen_ms:.4g} ms per call beyond its own work (tolerance {seen.tolerance_ms:.2g} ms), twice: "
            "figures that are not the timed calls' own (a clock or timer tampered with in the solution's process?)")


def _paired_run(session: Session, result: EvalResult, cuda: bool,
                device: _Device) -> tuple[PairedRun, tuple[int, int]]:
    """One paired run: the solution in the child, eager and torch.compile in the reference worker,
    each call's inputs drawn from a seed sent with it (timed by graph replays where `capture` got
    graphs: returns how many calls the baselines' and the solution's hold, 0 per call). The outputs
    of solution calls chosen after they returned (and of the last; of a replay, those of all its
    calls) are checked before the next call is made, so results cached across calls or work skipped
    on some calls fail it."""
    tag, plan = session.next_tag(), session.config.timing
    calls, ours = 0, 0   # the calls a graph holds: the baselines', the solution's (0: each call timed alone)

    def check(i: int, seed: int) -> None:
        with timed(result, "timing.checks"):
            bad = wrong_output(session, f"{tag}_{i}", seed, ours)
        if bad:
            where = f"call {bad[0] + 1} of the graph replayed as timed call {i}" if ours else f"timed call {i}"
            raise Stop("profile", f"output of {where} is wrong ({bad[1]}): results cached across calls, "
                                  "work skipped on some calls, or behaviour that changes with the number of "
                                  "calls (or under CUDA graph capture)?")

    def side(name: str) -> Side:
        if name == SOLUTION:
            return Side(name, lambda seed: _call_times(session.ask_child({"op": "call", "seed": seed}, "profile")))
        return Side(name, lambda seed: _baseline_times(
            session.ask_reference({"op": "call", "which": name, "seed": seed}), calls, ours))

    child_uid = _uid_of(session.child.proc.pid)
    if child_uid is None:   # a process of its own answering in its place would be stopped by no one
        raise Stop("profile", "the solution's process exited before its timing, while something still answered the "
                              "harness in its place (a process it left behind?)")
    # the GPU may be held by the child alone, unless its user is shared with other evaluations' children
    shared = "shared_sandbox_user" in result.flags
    # the GPU's contexts as the driver names them, once it names the (trusted) reference worker's under its pid
    contexts = ContextWatch([session.ref.proc.pid]) if cuda else None
    freezer = Freezer([child_uid], gpu_allowed=[session.child.proc.pid],
                      gpu_files=() if shared else GPU_FILES, gpu_contexts=contexts)
    ends = [lambda: session.ask_reference({"op": "time_end"})]
    # before each block's baseline windows: the other users' processes on the GPU stopped, and the GPU free of other
    # contexts' work (measure/alone.py; on the CPU the reference worker answers at once, and the round trip is the same)
    others, watched = Bystanders(spare=[child_uid]), False

    def alone() -> None:   # inside timing.quiet, each part a lap of its own (diagnostics)
        if watched:
            with timed(result, "timing.bystanders"):
                _stop_bystanders(others, contexts, result)
        with timed(result, "timing.gpu_alone"):
            _alone(session, result)
    # the lock shared while the run is started and captured (stage `capture`; a second run's, inside the alone hold,
    # is `timing`), then alone (`device.alone()`) from its first timed block
    started, sharing, stage = ExitStack(), False, "timing" if device.taken else "capture"
    try:
        device.shared(started)
        sharing = True
        with timed(result, stage):
            with timed(result, "timing.start"):  # timing.*: where the run's seconds go (diagnostics)
                start = session.ask_reference({"op": "time_start", "sides": list(BASELINES), "plan": plan.to_dict()})
                result.details["device_name"] = start.get("device_name")
                if contexts is not None:
                    contexts.on(start.get("device_uuid"))   # the timed GPU's alone (None: every GPU's)
                    watched = start.get("device_uuid") is not None   # never another GPU's: see sandbox/bystanders.py
                session.ask_child({"op": "time_start", "plan": plan.to_dict(), "route": session.route}, "profile")
            ends.insert(0, lambda: session.ask_child({"op": "time_end"}, "profile"))  # its guarded calls after the timed
            if cuda and plan.graphs:   # the capture's first replay is checked, not timed: beside other runs
                with timed(result, "timing.capture"):
                    calls, ours = capture(session, result)
        started.close()
        sharing = False
        device.alone()
        with timed(result, "timing"):
            if cuda and plan.graphs and short_of_memory(result):
                calls, ours = _captured_alone(session, result)
            if watched:   # a drain block: what was queued before drained, the solution stopped and its daemons named
                with _frozen_timed(result, freezer, alone):
                    pass
            with timed(result, "timing.run"):  # the timed windows and the checks among them (timing.checks)
                run = drive_paired(side(SOLUTION), [side(b) for b in BASELINES], plan, cuda=cuda, check=check,
                                   checks=session.config.timed_outputs_checked,
                                   quiet=lambda: _frozen_timed(result, freezer, alone))
    except BaseException:
        with ExitStack() as ending:
            if not sharing and not device.taken:   # `device.alone()` failed: the child is asked nothing without a hold
                with suppress(Exception):
                    device.shared(ending)
            for end in ends:  # what failed first is the verdict's reason, not a worker gone since
                with suppress(Exception):
                    end()
        raise
    finally:
        started.close()
        with timed(result, "timing") if device.taken else nullcontext(), timed(result, "timing.quiet"):
            try:
                freezer.close()
            finally:
                others.close()
        if contexts is not None and contexts.usable is False and "gpu_contexts_unchecked" not in result.flags:
            result.flags.append("gpu_contexts_unchecked")   # no NVML, or its pids are not this namespace's
    with timed(result, "timing"), timed(result, "timing.end"):
        for end in ends:
            end()
    return run, (calls, ours)


def _captured_alone(session: Session, result: EvalResult) -> tuple[int, int]:
    """The graphs captured once more, the GPU alone: captured beside other runs (and their graphs), a side ran out of
    memory, and timed per call it would carry torch.compile's host work where the baselines' graphs leave it out (a
    solution that refused capture read 1.50x faster than torch.compile with the same work, 2x H200, 2026-11-28)."""
    result.details["first_graph"] = result.details.get("graph")
    if "solution_not_captured" in result.flags:
        result.flags.remove("solution_not_captured")
    with timed(result, "timing.capture"):
        return capture(session, result)


def _stop_bystanders(others: Bystanders, contexts: ContextWatch, result: EvalResult) -> None:
    """The other sandbox users' processes with a context on the timed GPU stopped until the run ends, new ones and
    again the held ones. `details["bystanders"]`: the most held at once in a run, and the blocks after whose stop
    one still ran (flag `bystanders_ran`)."""
    running = others.stop(contexts.look().live)
    tally = result.details.setdefault("bystanders", {"stopped": 0, "ran": 0})
    tally["stopped"] = max(tally["stopped"], len(others.pids))
    if running:
        tally["ran"] += 1
        if "bystanders_ran" not in result.flags:
            result.flags.append("bystanders_ran")


@contextmanager
def _frozen_timed(result: EvalResult, freezer: Freezer, alone: Callable[[], None]) -> Iterator[FrozenBlock]:
    """The freezer's block around a round's baseline windows, its own cost (stopping the solution's processes
    and continuing them: a word to the kept helper each way, and /proc read until they are seen stopped and
    once more at the end) added to the `timing.quiet` stage, the windows inside it left out: how much of a
    GPU's time alone it takes. A quiet 2-core CPU, default plan: 1.39 s of an evaluation (13.6 ms a round)
    while a helper was forked for every signal, 0.25 s (2.5 ms) with the kept one (2026-11-28). A block in
    which the solution's processes ran after all fails the evaluation; one that began before all were seen
    stopped (a process inside the kernel) is flagged `frozen_late`. `alone()`, once the processes are stopped:
    other users' processes on the GPU stopped (sandbox.Bystanders), then the reference worker waits until no
    other context's work is left on the GPU. Where it never is, the verdict is the solution's if a process of
    its user other than the child holds the GPU (the freezer's look, while it is still stopped), else a harness
    fault."""
    stack = ExitStack()
    with timed(result, "timing.quiet"):
        block = stack.enter_context(freezer.frozen())
        try:
            alone()
        except Stop as stop:   # the GPU never free: whose work, if the solution's, asked while it is stopped
            try:
                seen = freezer.gpu_look() if stop.fault == "harness" else None
            finally:
                stack.close()
            if seen is not None and not seen.quiet and seen.fault is None:
                raise Stop("profile", seen.why_not_quiet()) from stop
            raise
        except BaseException:
            stack.close()
            raise
    if not block.stopped and "frozen_late" not in result.flags:
        result.flags.append("frozen_late")
    try:
        yield block
    finally:
        with timed(result, "timing.quiet"):
            stack.close()
    if not block.quiet:   # reached only when the windows ended without an error
        raise Stop("profile", block.why_not_quiet(), fault=block.fault)


WAITED_MS = 5.0   # a wait as long as a few time slices: another context's work was on the GPU


def _alone(session: Session, result: EvalResult) -> None:
    """The reference worker's wait for the GPU alone (measure.alone) before a block's windows; its figures kept
    in `details["gpu_alone"]` (blocks, those that waited, the longest wait), flag `waited_for_gpu` past WAITED_MS.
    Not alone after its limit: no timing (a harness fault: the work may be the stopped solution's, queued by a
    thread between its reply and the stop, or another user's on a shared GPU)."""
    seen = session.ask_reference({"op": "gpu_alone"}, timeout_s=60)
    tally = result.details.setdefault("gpu_alone", {"blocks": 0, "waited": 0, "max_waited_ms": 0.0})
    tally["blocks"] += 1
    waited = float(seen.get("waited_ms") or 0.0)
    tally["waited"] += waited > 0
    tally["max_waited_ms"] = round(max(tally["max_waited_ms"], waited), 3)
    if waited > WAITED_MS and "waited_for_gpu" not in result.flags:
        result.flags.append("waited_for_gpu")
    if not seen.get("alone", False):
        raise Stop("profile", f"the GPU was not free of other work {seen.get('waited_ms', 0) / 1e3:.1f} s after the "
                              "solution's processes were stopped (a probe kernel waited up to "
                              f"{seen.get('slowest_ms', 0):.1f} ms): GPU work queued by a thread of the solution "
                              "before its stop, or another program on this GPU; no timing was taken", fault="harness")


def _uid_of(pid: int) -> int | None:
    """The user a process runs as (the solution's child: its sandbox user), None where it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _baseline_times(reply: dict, calls: int, ours: int) -> CallTimes:
    """A baseline's call as the reference worker timed it. Where its graph of `calls` calls is timed against a
    solution timed per call (`ours` 0), its request drew `calls` input sets and a solution's one: the sets beyond
    one are its `extra_ms`, left out of the overhead `measure.watch` takes from it. Counted in, they made the
    overhead larger than a solution's whole request, and a timer reporting 0.001 ms of a real 0.1 ms passed (a
    review of the first version, 2026-11-28)."""
    times = _call_times(reply)
    if not calls or ours:
        return times
    prep = read_prep(reply)
    if prep is None:
        raise Stop("profile", f"the reference worker's call reply has no input-drawing time ({reply.get('prep_ms')!r})",
                   fault="harness")
    return replace(times, extra_ms=prep * (calls - 1) / calls)


def _call_times(reply: dict) -> CallTimes:
    times = read_times(reply)
    if times is None:
        raise Stop("profile", "a timed call's figures are not three non-negative numbers: was the timer tampered with?")
    return CallTimes(*times)


def _against_cache(task: Task, backend: Backend, config: EvalConfig, result: EvalResult, paired: PairedTiming) -> None:
    """The judge's cached baselines beside the paired ones (paired.cached_ms; flag `baseline_cached`);
    stored where there were none and the host was kept quiet, replaced where the paired eager figure
    is faster than the cached one by more than CACHE_AGREEMENT (flag `baseline_cache_disagreed`: a
    cached figure slower than the truth was poisoned when it was taken; a faster one is drift,
    recorded and kept)."""
    key = baselines.cache_key(task.code, backend.device, config.timing)
    cached = baselines.load(key) if config.use_baseline_cache else None
    fresh: tuple[TimingStats, TimingStats] = (result.eager, result.compile)
    if cached is not None:
        paired.cached_ms = {"eager": cached[0].median_ms, "compile": cached[1].median_ms}
        if cached[0].median_ms <= baselines.CACHE_AGREEMENT * fresh[0].median_ms:
            result.flags.append("baseline_cached")   # found, recorded beside the paired figures, kept
            return
        result.flags.append("baseline_cache_disagreed")
    if config.quiet_host:  # figures taken beside compiles are not for others to reuse
        baselines.store(key, *fresh, {"task": result.task, "device_name": result.details.get("device_name"),
                                      "stored": time.strftime("%Y-%m-%dT%H:%M:%S")})
