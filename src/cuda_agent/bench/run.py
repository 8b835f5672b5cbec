"""The benchmark loop: for each task, get a solution (a solutions folder, or the agent), evaluate
it, add its speed-of-light numbers, and append one line to results.jsonl.

Resumable: a task with a line in results.jsonl is not run again (a line recording a harness error
is, since that says nothing about the solution). Parallel: one worker process per visible GPU,
each seeing only its own (CUDA_VISIBLE_DEVICES); on CPU, or with one GPU, the loop runs in this
process.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from cuda_agent.bench import metrics
from cuda_agent.bench.roofline import roofline_for
from cuda_agent.bench.solutions import SolutionsDir, no_solution_result
from cuda_agent.harness import EvalConfig, EvalResult, keep_warm
from cuda_agent.journal import Journal, latest_by, read_rows
from cuda_agent.tasks import Task

RESULTS = "results.jsonl"
SETTINGS = "bench.json"
HARNESS_ERROR = "harness_error"



class BenchError(RuntimeError):
    """A benchmark that cannot start; the message says what to do."""


def harness_evaluate(task: Task, solution: Path, config: EvalConfig) -> EvalResult:
    """The harness's one entry point."""
    from cuda_agent.harness import evaluate

    return evaluate(task, solution, config)


def agent_solve(task: Task, model: str, workdir: Path, device: str) -> tuple[Path | None, dict[str, Any]]:
    """Run the agent on `task` with its output in `workdir` (continuing a run a kill interrupted);
    returns the best solution it verified (or None) and a summary of the run.

    Adapter to the agent package: the one place to change if its entry point changes."""
    from cuda_agent.agent import optimize

    resume = (workdir / "trajectory.jsonl").is_file()
    result = optimize(task, model=model, device=device, out=workdir, resume=resume, force=not resume)
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


def _solve(task: Task, spec: BenchSpec, solutions: SolutionsDir | None) -> tuple[Path | None, list[Path], dict]:
    if solutions is not None:
        return solutions.find(task), solutions.candidates(task), {}
    assert spec.model is not None and spec.agent_dir is not None
    workdir = spec.agent_dir / task.name
    solution, summary = agent_solve(task, spec.model, workdir, spec.device)
    return solution, [workdir / "solution"], {"agent": summary}


def died_row(task: Task, spec: BenchSpec, why: str) -> dict[str, Any]:
    """The results line of a task whose worker died under it: a harness error, retried on resume."""
    return {"task": task.name, "level": task.level, "problem_id": task.problem_id, "task_sha256": task.sha256,
            "reward": spec.eval_config.reward.failed, "correct": False, "stage": "run", "milestone": "failed",
            "reason": f"harness error: {why}", "device": spec.device, "flags": [HARNESS_ERROR],
            "speedup_vs_eager": None, "speedup_vs_compile": None}


def _harness_error(task: Task, device: str, error: BaseException, schedule) -> EvalResult:
    return EvalResult(task=task.name, reward=schedule.failed, correct=False, stage="run",
                      reason=f"harness error: {type(error).__name__}: {error}"[:500], device=device,
                      flags=[HARNESS_ERROR])


def run_task(task: Task, spec: BenchSpec, solutions: SolutionsDir | None = None) -> dict[str, Any]:
    """One results line for `task`: its evaluation, its identity, and its roofline."""
    t0 = time.perf_counter()
    solution: Path | None = None
    extra: dict[str, Any] = {}
    schedule = spec.eval_config.reward
    try:
        solution, looked_for, extra = _solve(task, spec, solutions)
        if solution is None:
            result = no_solution_result(task, looked_for, spec.device, schedule)
        else:
            result = spec.evaluate(task, solution, spec.eval_config)
    except Exception as e:  # the harness's (or the agent's) own failure: recorded, retried on resume
        result = _harness_error(task, spec.device, e, schedule)
    row = result.to_dict()
    row.update(task=task.name, level=task.level, problem_id=task.problem_id, task_sha256=task.sha256,
               solution_path=str(solution) if solution else None, bench_seconds=time.perf_counter() - t0,
               **extra)
    if spec.roofline:
        row["roofline"] = roofline_for(task, spec.device)
        row["sol_fraction"] = {w: metrics.sol_fraction(row, w) for w in metrics.TIMED}
    return row


# ---- resume -----------------------------------------------------------------------------------

def finished_tasks(results_path: Path) -> set[str]:
    """Tasks with a line in results.jsonl that is a real verdict (not a harness error)."""
    return {name for name, row in latest_by(read_rows(results_path), "task").items()
            if HARNESS_ERROR not in (row.get("flags") or [])}


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


def run_bench(tasks: list[Task], spec: BenchSpec, out: str | Path, *, workers: list[str] | None = None,
              restart: bool = False, max_seconds: float | None = None,
              on_row: Callable[[dict[str, Any]], None] | None = None) -> BenchRun:
    """Evaluate every task not yet in `out`/results.jsonl, appending one line each.

    `workers`: GPU ids, one worker process each (None or one: in this process). `max_seconds`:
    start no task after this long, so a time-limited session ends cleanly and the next resumes."""
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

    def record(row: dict[str, Any]) -> None:
        journal.append(row)
        run.rows.append(row)
        run.evaluated += 1
        if on_row:
            on_row(row)

    with Journal(out / RESULTS) as journal:
        if workers and len(workers) > 1:
            from cuda_agent.bench.pool import run_parallel

            run.stopped_early = run_parallel(pending, spec, workers, record, deadline, run_task, died_row)
        else:
            solutions = SolutionsDir(spec.solutions) if spec.solutions else None
            with keep_warm():  # the next evaluation's processes start while this one runs
                for task in pending:
                    if deadline and time.monotonic() > deadline:
                        run.stopped_early = True
                        break
                    record(run_task(task, spec, solutions))
    return run


def report_rows(out: str | Path) -> list[dict[str, Any]]:
    """The rows a report is made from: the latest line of each task in results.jsonl."""
    return list(latest_by(read_rows(Path(out) / RESULTS), "task").values())
