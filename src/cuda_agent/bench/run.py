"""The benchmark loop: for each task, get a solution (a solutions folder, or the agent), evaluate
it through the evaluation service, add its speed-of-light numbers, and append one line to
results.jsonl.

Resumable: a task with a line in results.jsonl is not run again (a line recording a harness error
is, since that says nothing about the solution). Parallel: the service spreads the evaluations over
its evaluators (every GPU it was given); agent runs go on `parallel` at a time, their evaluations
through the same service.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from cuda_agent.bench import metrics
from cuda_agent.bench.roofline import roofline_for
from cuda_agent.bench.solutions import SolutionsDir, no_solution_result
from cuda_agent.harness import EvalConfig, EvalResult
from cuda_agent.journal import Journal, latest_by, read_rows
from cuda_agent.service import PRIORITY_BENCH, EvalService, ServiceSettings, in_flight, using
from cuda_agent.tasks import Task
from cuda_agent.usage import UsageError

RESULTS = "results.jsonl"
SETTINGS = "bench.json"

class BenchError(UsageError, RuntimeError):
    """A benchmark that cannot start; the message says what to do."""


def harness_evaluate(task: Task, solution: Path, config: EvalConfig) -> EvalResult:
    """The harness's one entry point."""
    from cuda_agent.harness import evaluate

    return evaluate(task, solution, config)


def agent_solve(task: Task, model: str, workdir: Path, device: str,
                service: EvalService | None = None) -> tuple[Path | None, dict[str, Any]]:
    """Run the agent on `task` with its output in `workdir` (continuing a run a kill interrupted);
    returns the best solution it verified (or None) and a summary of the run.

    Adapter to the agent package: the one place to change if its entry point changes."""
    from cuda_agent.agent import optimize

    resume = (workdir / "trajectory.jsonl").is_file()
    result = optimize(task, model=model, device=device, out=workdir, resume=resume, force=not resume,
                      service=service)
    summary = {k: getattr(result, k) for k in ("status", "turns", "tokens", "seconds", "evaluations", "error")}
    return (Path(result.solution) if result.solution else None), summary


@dataclass
class BenchSpec:
    """Everything a worker needs to turn a task into a results line (picklable)."""

    device: str
    eval_config: EvalConfig
    solutions: Path | None = None          # score existing solutions ...
    model: str | None = None               # ... or run the agent with this model
    agent_dir: Path | None = None          # where the agent's runs go (one folder per task)
    roofline: bool = True
    evaluate: Callable[[Task, Path, EvalConfig], EvalResult] = harness_evaluate

    def mode(self) -> dict[str, Any]:
        """What a results.jsonl was made with; resuming with other settings is refused."""
        return {"device": self.device, "solutions": str(self.solutions) if self.solutions else None,
                "model": self.model, "policy": self.eval_config.policy}


def _harness_error(task: Task, spec: BenchSpec, error: BaseException) -> EvalResult:
    return EvalResult.failed(task.name, "run", f"harness error: {type(error).__name__}: {error}"[:500],
                             spec.eval_config, device=spec.device, fault="harness")


def _evaluate_job(ctx: Any, evaluate: Callable, task: Task, solution: Path, config: EvalConfig) -> EvalResult:
    """A BenchSpec's own evaluate function, run on an evaluator of the service (tests, stand-ins)."""
    return evaluate(task, solution, config)


def _roofline_job(ctx: Any, task: Task, device: str) -> dict[str, Any]:
    """The task's roofline, measured where the device is (its peaks, a real run where needed)."""
    return roofline_for(task, device)


def _row(task: Task, spec: BenchSpec, result: EvalResult, solution: Path | None, t0: float,
         extra: dict[str, Any], roofline: dict[str, Any] | None) -> dict[str, Any]:
    """One results line: the verdict, the task's identity, and its roofline."""
    row = result.to_dict()
    row.update(task=task.name, level=task.level, problem_id=task.problem_id, task_sha256=task.sha256,
               solution_path=str(solution) if solution else None, bench_seconds=time.perf_counter() - t0,
               **extra)
    if roofline is not None:
        row["roofline"] = roofline
        row["sol_fraction"] = {w: metrics.sol_fraction(row, w) for w in metrics.TIMED}
    return row


class _Task:
    """One task's way through the bench: its solution, its verdict, its roofline."""

    def __init__(self, task: Task, spec: BenchSpec, svc: EvalService, solutions: SolutionsDir | None):
        self.task, self.spec, self.svc, self.solutions = task, spec, svc, solutions
        self.t0 = time.perf_counter()
        self.solution: Path | None = None
        self.extra: dict[str, Any] = {}

    def start(self) -> Future:
        """The verdict's future (the agent's run first, in this thread, with --model)."""
        spec, task = self.spec, self.task
        try:
            if self.solutions is not None:
                self.solution, looked_for = self.solutions.find(task), self.solutions.candidates(task)
            else:
                assert spec.model is not None and spec.agent_dir is not None
                workdir = spec.agent_dir / task.name
                self.solution, summary = agent_solve(task, spec.model, workdir, spec.device, self.svc)
                looked_for, self.extra = [workdir / "solution"], {"agent": summary}
            if self.solution is None:
                return _done(no_solution_result(task, looked_for, spec.device, spec.eval_config))
            if spec.evaluate is harness_evaluate:
                return self.svc.submit_path(task, self.solution, spec.eval_config, priority=PRIORITY_BENCH)
            return self.svc.call(_evaluate_job, spec.evaluate, task, self.solution, spec.eval_config)
        except Exception as e:  # the harness's (or the agent's) own failure: recorded, retried on resume
            return _done(_harness_error(task, spec, e))

    def row(self, verdict: Future) -> dict[str, Any]:
        spec = self.spec
        error = verdict.exception()
        result = _harness_error(self.task, spec, error) if error else verdict.result()
        roofline = None
        if spec.roofline:
            job = self.svc.call(_roofline_job, self.task, spec.device)
            roofline = job.result() if job.exception() is None else {"error": str(job.exception())}
        return _row(self.task, spec, result, self.solution, self.t0, self.extra, roofline)


def _done(result: EvalResult) -> Future:
    f: Future = Future()
    f.set_result(result)
    return f


# ---- resume -----------------------------------------------------------------------------------

def finished_tasks(results_path: Path) -> set[str]:
    """Tasks with a line in results.jsonl that is a real verdict (not a harness error)."""
    return {name for name, row in latest_by(read_rows(results_path), "task").items()
            if not EvalResult.written_harness_error(row)}


def check_settings(out: Path, spec: BenchSpec, restart: bool) -> None:
    """Record the run's settings in bench.json; refuse to resume a run made with other ones."""
    path = out / SETTINGS
    mode = spec.mode()
    if restart:
        (out / RESULTS).unlink(missing_ok=True)
    elif path.is_file() and (out / RESULTS).is_file():
        before = json.loads(path.read_text()).get("mode")
        if before != mode:
            raise BenchError(f"{out} holds results made with {before}, not {mode}; choose a new --out "
                             "folder, or pass --restart to discard the old results")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mode": mode, "eval_config": asdict(spec.eval_config)}, indent=1, default=str))


# ---- the loop ---------------------------------------------------------------------------------

@dataclass
class BenchRun:
    """What one invocation did."""

    out: Path
    selected: int
    skipped: int                      # already finished in an earlier run
    evaluated: int
    stopped_early: bool = False       # --max-seconds reached before every task ran
    rows: list[dict[str, Any]] = field(default_factory=list)


def run_bench(tasks: list[Task], spec: BenchSpec, out: str | Path, *, service: EvalService | None = None,
              settings: ServiceSettings | None = None, parallel: int | None = None, restart: bool = False,
              max_seconds: float | None = None, on_row: Callable[[dict[str, Any]], None] | None = None) -> BenchRun:
    """Evaluate every task not yet in `out`/results.jsonl, appending one line each.

    `service`: the evaluation service to use (else one is started with `settings` and closed at
    the end). `parallel`: tasks in flight at once (default: the service's evaluators, plus its
    build-ahead for solutions). `max_seconds`: start no task after this long, so a time-limited
    session ends cleanly and the next resumes."""
    out = Path(out)
    if spec.solutions is None and spec.model is None:
        raise BenchError("give --solutions DIR (score existing solutions) or --model NAME (run the agent)")
    if spec.model is not None and spec.agent_dir is None:
        spec = replace(spec, agent_dir=(out / "agent").resolve())
    check_settings(out, spec, restart)
    done = finished_tasks(out / RESULTS)
    pending = [t for t in tasks if t.name not in done]
    run = BenchRun(out=out, selected=len(tasks), skipped=len(tasks) - len(pending), evaluated=0)
    deadline = time.monotonic() + max_seconds if max_seconds else None
    solutions = SolutionsDir(spec.solutions) if spec.solutions else None
    with Journal(out / RESULTS) as journal, using(service, replace(settings or ServiceSettings(), device=spec.device)) as svc:
        width = parallel or (svc.evaluators + (svc.settings.build_ahead if solutions else 0))
        todo = list(reversed(pending))

        def take() -> _Task | None:
            if todo and deadline and time.monotonic() > deadline:
                run.stopped_early = True
                todo.clear()
            return _Task(todo.pop(), spec, svc, solutions) if todo else None

        # each lane waits on its task's verdict: the agent's run first, with --model
        for item, verdict in in_flight(width, take, lambda it: it.start().result(), name="bench"):
            row = item.row(verdict)
            journal.append(row)
            run.rows.append(row)
            run.evaluated += 1
            if on_row:
                on_row(row)
    return run


def report_rows(out: str | Path) -> list[dict[str, Any]]:
    """The rows a report is made from: the latest line of each task in results.jsonl."""
    return list(latest_by(read_rows(Path(out) / RESULTS), "task").values())
