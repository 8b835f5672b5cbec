"""The synth run: compose candidates, filter them, write the dataset. Resumable and parallel.

State lives beside the dataset in `<DATASET>.synth/`: `config.json`, `seeds.json` (the checked
catalog, fixed for the run so a resume draws the same candidates) and `candidates.jsonl`, one line
per finished candidate (accepted ones carry their code), appended and fsynced. A killed run loses
only the candidates in flight: they have no line, so a resume redoes them, and candidate `i` is
drawn from (run seed, i) alone, so it is the same candidate. Candidates are composed and checked
statically here, and executed as jobs on the evaluation service's evaluators (`workers` of them
per GPU, or on the CPU), each keeping its own warm child process. With a mix (mix.py), each
candidate is composed for a task class that the accepted set still lacks, taken in order from that
class's own stream of indices (so the dataset does not depend on how many workers ran or the order
they finished in), and the run ends when every class has its quota.

A run can be bounded in time (`max_seconds`, for a device call with a limit): no candidate starts
after the deadline, those in flight get `grace_s` to finish, and any still running then is cancelled
(its child killed; no line, so a resume redoes it). The run then ends as usual, with its dataset.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from cuda_agent.measure import TimingPlan
from cuda_agent.service import PRIORITY_SYNTH, EvalService, JobContext, ServiceSettings, in_flight, using
from cuda_agent.journal import Journal, read_rows
from cuda_agent.synth.categories import task_class
from cuda_agent.synth.compose import Candidate, ComposeError
from cuda_agent.synth.execute import (
    CANCELLED, GPU_CHILD_THREADS, ExecutionFilters, Executor, Limits, add_seconds, memory_share,
)
from cuda_agent.synth.filters import (
    FILTER_VERSIONS, Outcome, Window, check_format, check_stochastic_source, weights_reason,
)
from cuda_agent.synth.mix import Mix, Plan
from cuda_agent.synth.similarity import ReferenceIndex, fingerprint


@dataclass
class SynthConfig:
    out: Path
    count: int = 100
    composer: str = "program"          # program | llm
    device: str = "cuda"
    seed: int = 0
    window: Window | None = None       # None: the device's default
    similarity_threshold: float = 0.7
    kernelbench: Path | None = None    # KernelBench JSONL; None: similarity not checked
    workers: int | None = None         # evaluators per GPU (or on the CPU); None: 1
    address: str | None = None         # a Ray cluster for the evaluation service; None: $RAY_ADDRESS or a local Ray
    max_candidates: int | None = None  # None: 50 per wanted task
    max_rescales: int = 2
    memory_budget_bytes: int = 8 << 30  # the size search keeps weights + inputs + intermediates below this
    # A task's weights, at most (and within the memory budget): the judge draws them on the host for every
    # evaluation, as KernelBench does; a 4 GiB nn.Bilinear took 18-21 s a draw on an H200's host (2026-11-29).
    # KernelBench's largest, level 3's VGG19, holds 0.55 GiB.
    max_weights_bytes: int = 2 << 30
    atol: float = 1e-2
    rtol: float = 1e-2
    # The set's timings choose sizes and say how fast eager and torch.compile are; the window is 100x wide and
    # the reward is measured again by the judge. The baselines' timing holds the GPU alone, the workers' runs and
    # compiles wait for it: 0.1 s of calls a side (was 0.3; 1.06 s of timing a candidate, 1,119 accepted/h with six workers on
    # an H100, 2026-11-27), at least 5 calls (a 100 ms task: 0.5 s).
    timing: TimingPlan = field(default_factory=lambda: TimingPlan(min_runs=5, max_runs=100, budget_s=0.1,
                                                                  warmup_s=0.05, min_warmup=2))
    limits: Limits = field(default_factory=Limits)
    # False (on a GPU): the size search's timing, which only picks a size, holds the lock shared beside the other
    # workers' runs instead of waiting for them to drain (2x H100, 2026-11-28: that timing was 41% of the workers'
    # seconds, 492 accepted per GPU-hour); the window and the set's figures stay the baselines', timed alone.
    # True: alone, as before.
    quiet_timing: bool = False
    jsonl: bool = False                # also (or, for a .jsonl OUT, only) write JSONL
    mix: Mix | None = field(default_factory=Mix)  # target share per task class; None: draw any seed
    hf_families: tuple[str, ...] | None = None    # transformers model types to crawl blocks from; None: all
    seeds: Path | None = None          # a saved catalog to start from (a run's seeds.json); None: crawl (cached)
    max_seconds: float | None = None   # no candidate starts this long after synthesize() began; None: no limit
    grace_s: float = 30.0              # then candidates in flight get this long before they are cancelled
    # A resume goes on with the timing plan the run started with (its figures timed alike), unless `retime`:
    # then its new candidates are timed with `timing`, each accepted record names its plan (`timing_plan`,
    # TimingPlan.key()), and the plans it had before are kept, oldest first, in `timings_before` (a record
    # that names none was timed with the first).
    retime: bool = False
    timings_before: tuple[dict, ...] = ()

    def timing_plans(self) -> list[TimingPlan]:
        """The plans the run has timed with, oldest first (a record that names none was timed with the first)."""
        return [*(TimingPlan.from_dict(d) for d in self.timings_before), self.timing]

    @property
    def state_dir(self) -> Path:
        return self.out.parent / f"{self.out.stem}.synth"

    def resolved_window(self) -> Window:
        return self.window or Window.for_device(self.device)


@dataclass
class Phases:
    """Where a synthesize() call's wall time went, in seconds (the run fills in its own phases)."""
    catalog_s: float = 0.0                   # the seed catalog: crawled and checked, or read
    catalog_from: str = ""                   # what it was read from, or "the crawl"
    service_s: float = 0.0                   # starting the evaluation service (its Ray, its evaluators)
    first_candidate_s: float | None = None   # the first candidate's start, from the call's start
    candidates_s: float = 0.0                # from the first candidate's start to the last one's end
    close_s: float = 0.0                     # closing the service
    write_s: float = 0.0                     # writing the dataset


class Candidates:
    """candidates.jsonl (the one journal): one fsynced line per finished candidate, the run's only
    source of truth; a line a kill cut short is dropped, and that candidate is redone."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[int, dict] = {r["index"]: r for r in read_rows(path) if "index" in r}
        self._journal = Journal(path)
        self.lock = threading.Lock()

    def append(self, rec: dict) -> None:
        self._journal.append(rec)
        with self.lock:
            self.records[rec["index"]] = rec

    def accepted(self) -> list[dict]:
        with self.lock:
            records = list(self.records.values())
        return sorted((r for r in records if r["filter"] == "accepted"), key=lambda r: r["index"])

    def close(self) -> None:
        self._journal.close()


class Run:
    """One synth run; `run()` returns when `count` tasks are accepted (with a mix: every class's
    quota of them), candidates run out, or the `deadline` (epoch seconds) has passed and the
    candidates in flight have finished or been cancelled. `note` hears of the run's milestones."""

    def __init__(self, config: SynthConfig, composer, on_record: Callable[[dict], None] | None = None,
                 deadline: float | None = None, note: Callable[[str], None] | None = None):
        self.config = config
        self.composer = composer
        self.window = config.resolved_window()
        self.references = ReferenceIndex.from_jsonl(config.kernelbench) if config.kernelbench else None
        self.journal = Candidates(config.state_dir / "candidates.jsonl")
        self.on_record = on_record or (lambda rec: None)
        self.lock = threading.Lock()
        self.fingerprints = {r["fingerprint"] for r in self.journal.accepted()}
        self.next_index = 0
        self.stop = threading.Event()
        self.plan = self._plan()
        self.wants: dict[int, str] = {}
        self.deadline = deadline
        self.hard_stop = deadline + config.grace_s if deadline is not None else None
        self.note = note or (lambda text: None)
        self.stopped_at_limit = False      # the deadline came before the run was done
        self._deadline_seen, self._deadline_lock = False, threading.Lock()
        self.cancelled: list[int] = []     # candidates cut short at the hard stop
        self.first_claim_at: float | None = None  # epoch seconds
        self.phases = Phases()

    def _plan(self) -> Plan | None:
        """The mix's plan, when the composer can aim at a class (the program composer can): classes
        its catalog cannot build are left out of the mix; the journal's candidates are counted."""
        mix, classes = self.config.mix, getattr(self.composer, "classes", None)
        if mix is None or classes is None:
            return None
        plan = Plan(mix.without(set(mix.shares) - classes()), self.config.count, self.config.seed)
        for rec in self.journal.records.values():
            plan.record(rec["index"], _class_of(rec), rec["filter"] == "accepted")
        return plan

    def holds_set(self) -> bool:
        """Whether the journal already holds what the run is after (no candidate left to run)."""
        with self.lock:
            return not self._work_left()

    def _work_left(self) -> bool:
        """Whether candidates remain to be run (the caller holds the lock)."""
        cfg = self.config
        limit = cfg.max_candidates if cfg.max_candidates is not None else 50 * cfg.count
        if self.plan is not None:  # the plan picks the indices: the limit counts candidates
            return not (self.stop.is_set() or self.plan.done or self.plan.started >= limit)
        while self.next_index in self.journal.records:
            self.next_index += 1
        enough = len(self.journal.accepted()) >= cfg.count
        return not (self.stop.is_set() or enough or self.next_index >= limit)

    def _past_deadline(self) -> bool:
        """Whether the deadline has passed (the first to see it says so)."""
        if self.deadline is None or time.time() < self.deadline:
            return False
        with self._deadline_lock:
            if not self._deadline_seen:
                self._deadline_seen = True
                self.note(f"time limit: no new candidates; those in flight get {self.config.grace_s:.0f} s to finish")
        return True

    def _claim(self) -> int | None:
        with self.lock:
            if not self._work_left() or self._past_deadline():
                return None
            if self.plan is not None:
                claimed = self.plan.claim()
                if claimed is None:
                    return None
                index, self.wants[claimed[0]] = claimed
            else:
                index = self.next_index
                self.next_index += 1
            if self.first_claim_at is None:
                self.first_claim_at = time.time()
                self.note(f"first candidate started (index {index})")
            return index

    def _finish(self, rec: dict) -> None:
        with self.lock:
            if self.plan is not None:
                self.plan.finish(rec["index"], _class_of(rec), rec["filter"] == "accepted")

    def _stopped(self) -> None:
        """Sets `stopped_at_limit`: the deadline ended the run before it was done (candidates were
        cut short, or more were left to run)."""
        with self.lock:
            self.stopped_at_limit = self._deadline_seen and (bool(self.cancelled) or self._work_left())

    def _cancel(self, index: int) -> None:
        """A candidate the hard stop cut short: no journal line and no class counted."""
        with self.lock:
            if self.plan is not None:
                self.plan.cancel(index)
            self.cancelled.append(index)

    def run(self, service: EvalService | None = None) -> list[dict]:
        """Claim, compose, check and execute candidates until `count` are accepted or candidates
        run out (or the deadline passes); the executions run on `service` (else on one started for
        this run)."""
        self.recheck_weights()
        if self.holds_set():  # a finished run resumed (or one whose journal already holds the set): no device needed
            return self.rows()
        if self._past_deadline():  # spent on the catalog: no service
            self._stopped()
            return self.rows()
        started = time.time()
        with using(service, _settings(self.config)) as svc:
            self.phases.service_s = time.time() - started
            width = svc.evaluators
            sharing = svc.settings.evaluators_per_device
            errors: list[BaseException] = []

            def work(index: int) -> None:
                try:
                    rec = self.evaluate(index, svc, sharing)
                    if rec["filter"] == CANCELLED.filter:
                        self._cancel(index)
                        return
                    self.journal.append(rec)
                    self._finish(rec)
                    self.on_record(rec)
                except BaseException:  # the run's own bug: the others stop, and it is raised below
                    self.stop.set()
                    raise

            try:
                for _, finished in in_flight(width, self._claim, work, poll=self._past_deadline, name="synth"):
                    if finished.exception() is not None:
                        errors.append(finished.exception())
            except KeyboardInterrupt:
                self.stop.set()
                raise
            done = time.time()
            self.phases.candidates_s = done - self.first_claim_at if self.first_claim_at else 0.0
        self.phases.close_s = time.time() - done
        self._stopped()
        if errors:
            raise errors[0]
        return self.rows()

    def recheck_weights(self) -> int:
        """The journal's accepted tasks that an older memory filter let in, their weights counted on the meta device
        (in a worker child: the code runs there) and held to the run's limit: a resume does not run a candidate
        again, and the 6k set kept 58 nn.Bilinear tasks of 2-16 GiB from before the limit (a review, 2026-11-29).
        Each gets a journal line of the current version, a refusal (filter `memory`) where it is over; a model
        that cannot be made on the meta device stays, and is looked at again by the next resume. Returns how many
        were refused."""
        version = FILTER_VERSIONS["memory"]
        stale = [r for r in self.journal.accepted()
                 if r.get("filter_versions", {}).get("memory") != version and isinstance(r.get("code"), str)]
        if not stale:
            return 0
        refused, executor = 0, Executor(self.config.state_dir / "recheck", limits=self.config.limits)
        try:
            for rec in stale:
                reply = executor.request({"op": "weights", "code": rec["code"]}, self.config.limits.eager_s)
                weights = reply.get("weights_bytes") if reply.get("ok") else None
                if weights is None:   # not made on the meta device here (a missing package?): looked at next time
                    continue
                new = {**rec, "filter_versions": {**rec.get("filter_versions", {}), "memory": version},
                       "weights_bytes": weights}
                if weights > self.config.max_weights_bytes:
                    was = rec.get("filter_versions", {}).get("memory", "1")
                    new.update(filter="memory", reason=weights_reason(weights, self.config.max_weights_bytes) +
                               f" (found on resume; accepted under memory filter v{was})")
                    refused += 1
                self.journal.append(new)
        finally:
            executor.clean()
        self.plan = self._plan()
        if refused:
            self.note(f"{refused} accepted tasks of an older memory filter are over the weights limit: refused")
        return refused

    def rows(self) -> list[dict]:
        """The dataset's rows: with a mix, the first accepted of each class up to its quota."""
        accepted = self.journal.accepted()
        if self.plan is not None:
            return self.plan.select(accepted, _class_of)
        return accepted[: self.config.count]

    def evaluate(self, index: int, svc: EvalService, sharing: int = 1) -> dict:
        """One candidate through every filter; the record says which one stopped it, or accepted.
        The static filters run here, the execution on an evaluator of `svc`."""
        t0 = time.perf_counter()
        rec: dict = {"index": index, "composer": self.config.composer, "seconds": {}}
        want = self.wants.get(index)
        if want is not None:
            rec["want"] = want
        try:
            cand = self.composer.compose(index, want) if want is not None else self.composer.compose(index)
        except ComposeError as e:
            rec["seconds"]["compose"] = time.perf_counter() - t0
            return {**rec, **asdict(Outcome("compose", str(e)[:300]))}
        rec["seconds"]["compose"] = cand.compose_s or time.perf_counter() - t0
        rec.update(name=cand.name, ops=cand.ops, categories=cand.categories, task_class=task_class(cand.categories),
                   structure=cand.structure, **cand.extra)
        outcome, fp = self._static(cand, rec)
        if outcome is None:
            outcome, part, cand = svc.call(execute_job, self.config, sharing, cand, self.hard_stop,
                                           priority=PRIORITY_SYNTH).result()
            seconds = rec["seconds"]
            rec.update({k: v for k, v in part.items() if k != "seconds"})
            add_seconds(seconds, part["seconds"])
            with self.lock:
                if outcome.accepted and fp in self.fingerprints:
                    outcome = Outcome("duplicate", "the same program was accepted meanwhile")
                elif outcome.accepted:
                    self.fingerprints.add(fp)
        rec.update(asdict(outcome))
        if outcome.accepted:
            rec.update(code=cand.code, fingerprint=fp, device=self.config.device,
                       filter_versions=dict(FILTER_VERSIONS), timing_plan=self.config.timing.key())
        rec["seconds"]["total"] = time.perf_counter() - t0
        return rec

    def _static(self, cand: Candidate, rec: dict) -> tuple[Outcome | None, str]:
        bad = check_format(cand.code, cand.name) or check_stochastic_source(cand.code)
        if bad:
            return bad, ""
        if self.references is not None:
            near = self.references.nearest(cand.code)
            rec.update(nearest_kernelbench=near.name, kernelbench_similarity=near.score)
            if near.score >= self.config.similarity_threshold:
                return Outcome("kernelbench", f"{near.score:.2f} similar to {near.name}"), ""
        fp = fingerprint(cand.code)
        with self.lock:
            if fp in self.fingerprints:
                return Outcome("duplicate", "the same program (up to names and sizes) is already accepted"), fp
        return None, fp


def execute_job(ctx: JobContext, config: SynthConfig, sharing: int, cand: Candidate,
                stop_at: float | None = None) -> tuple[Outcome, dict, Candidate]:
    """A candidate's execution filters on an evaluator of the service (eager runs, determinism,
    RNG use, degenerate outputs, the size search, torch.compile and the baselines), in the warm
    child process this evaluator keeps for the run: the outcome (CANCELLED when `stop_at`, epoch
    seconds, came first), the record's new fields and the candidate as resized."""
    key = f"synth:{config.state_dir}"
    executor = ctx.state.get(key)
    if executor is None:
        executor = Executor(config.state_dir / "work" / f"w{os.getpid()}", None, config.limits,
                            threads=GPU_CHILD_THREADS if config.device == "cuda" else None)
        ctx.state[key] = executor
        ctx.on_close(executor.close)
    filters = ExecutionFilters(config, memory_share(config, sharing), stop_at)
    rec: dict = {"seconds": {}}
    try:
        outcome = filters.execute(cand, rec, executor)
    finally:
        executor.next_candidate()
    return outcome, rec, cand


def _class_of(rec: dict) -> str | None:
    """A record's task class: the one it was composed for, else the one of its categories."""
    if rec.get("want"):
        return rec["want"]
    return task_class(rec["categories"]) if rec.get("categories") else None


def _settings(config: SynthConfig) -> ServiceSettings:
    """A service for a run of its own: `workers` evaluators per GPU (or on the CPU), no builders
    (candidates are not built), no spare harness processes (candidates run in synth's own child), and no
    cores set aside: an evaluator's pair is for a solution's timing, which synth has none of, and its child runs
    on the others (2x H200, 2026-11-28: 12 evaluators held 24 of 32 cores and every candidate's eager runs and
    compiles shared the other 8; 646 accepted per GPU-hour against one GPU's 1,085-1,213)."""
    workers = config.workers or 1
    return ServiceSettings(address=config.address, device=config.device, cpu_evaluators=workers,
                           evaluators_per_device=workers, build_workers=0, spares=0, pin_cores=False)
