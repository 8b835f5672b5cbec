"""Baseline tables: eager and torch.compile times (with spread), speed-of-light time and fractions,
and the ratio to published reference timings, per task.

Resumable: one JSONL line per timed task, appended as it finishes; running the command again
times only the tasks not yet in the file (`max_seconds` lets a time-limited session stop cleanly).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from cuda_agent.bench import metrics
from cuda_agent.bench.roofline import roofline_for
from cuda_agent.bench.tables import ms, pct, times
from cuda_agent.devices import COMPILE_THREADS_ENV, SHARED_COMPILE_THREADS
from cuda_agent.harness import EvalConfig, TimingStats, task_baselines
from cuda_agent.journal import Journal, latest_by, read_rows
from cuda_agent.service import PRIORITY_BENCH, EvalService, ServiceSettings, in_flight, using
from cuda_agent.tasks import Task
from cuda_agent.usage import UsageError

BaselineTimer = Callable[[Task, EvalConfig], tuple[TimingStats, TimingStats]]


def harness_time_baselines(task: Task, config: EvalConfig) -> tuple[TimingStats, TimingStats]:
    """Eager and torch.compile timings of `task` as every evaluation takes them (the harness's one
    baseline function, its device lock and its cache, which later evaluations then read)."""
    return task_baselines(task.code, task.name, config)


def published_times(path: str | Path | None) -> dict[tuple[int, str], float]:
    """Mean milliseconds per (level, task name) from a KernelBench timing JSON
    (`{"level1": {"1_Square_matrix_multiplication_.py": {"mean": ...}}}`)."""
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: cannot read published timings ({e}); give a KernelBench timing JSON "
                         "such as results/timing/H100_Modal/baseline_time_torch.json") from None
    out = {}
    for level_key, tasks in data.items():
        if level_key.startswith("level") and isinstance(tasks, dict):
            for name, stats in tasks.items():
                if isinstance(stats, dict) and stats.get("mean") is not None:
                    out[(int(level_key[5:]), name.removesuffix(".py"))] = float(stats["mean"])
    return out


@dataclass
class BaselinesRun:
    path: Path
    selected: int
    timed: int
    failed: int
    stopped_early: bool


def baselines(tasks: list[Task], device: str, out_path: str | Path, *, config: EvalConfig | None = None,
              timer: BaselineTimer = harness_time_baselines, published: dict[tuple[int, str], float] | None = None,
              max_seconds: float | None = None, retry_errors: bool = False, roofline: bool = True,
              on_row: Callable[[dict[str, Any]], None] | None = None, workers: int = 1,
              service: EvalService | None = None) -> BaselinesRun:
    """Time eager and torch.compile for every task not yet in `out_path` (JSONL), appending a line
    each, as jobs on the evaluation service (`service`, or one started with `workers` evaluators on
    the device: each compiles on its own and takes the device's lock only to time, so compilation
    overlaps timing). A task that runs out of device memory beside the others is timed again alone
    at the end (big level-1 tasks hold 12+ GB each); one left untimed at the deadline stays pending
    for the next run."""
    out_path = Path(out_path)
    config = config or EvalConfig(device=device)
    published = published or {}
    done = {name for name, r in latest_by(read_rows(out_path), "task").items()
            if not (retry_errors and r.get("error"))}
    pending = [t for t in tasks if t.name not in done]
    run = BaselinesRun(out_path, len(tasks), 0, 0, False)
    deadline = time.monotonic() + max_seconds if max_seconds else None
    jobs = {t.name: (t, device, config, timer, published, roofline) for t in pending}
    settings = ServiceSettings(device=device, cpu_evaluators=workers, evaluators_per_device=workers)
    with Journal(out_path) as journal, using(service, settings) as svc:
        shared = svc.evaluators > 1
        alone: list[tuple] = []  # ran out of device memory beside other workers: timed again alone
        for row in _rows(svc, list(jobs.values()), svc.evaluators, deadline):
            if row is None:
                run.stopped_early = True
                break
            if shared and OUT_OF_MEMORY in (row.get("error") or ""):
                alone.append(jobs[row["task"]])
                continue
            _record(run, journal, row, on_row)
        for row in _rows(svc, alone, 1, deadline) if alone and not run.stopped_early else ():
            if row is None:
                run.stopped_early = True
                break
            _record(run, journal, row, on_row)
    return run


OUT_OF_MEMORY = "OutOfMemoryError"


def _record(run: BaselinesRun, journal: Journal, row: dict[str, Any], on_row) -> None:
    journal.append(row)
    run.timed += 1
    run.failed += bool(row.get("error"))
    if on_row:
        on_row(row)


def _baseline_job(ctx: Any, *job: Any) -> dict[str, Any]:
    # Evaluators sharing a device compile at once: each with every core would thrash.
    os.environ.setdefault(COMPILE_THREADS_ENV, SHARED_COMPILE_THREADS)
    return baseline_row(*job)


def _rows(svc: EvalService, jobs: list[tuple], width: int, deadline: float | None) -> Iterator[dict[str, Any] | None]:
    """`baseline_row` of each job on the service's evaluators, `width` at a time, in the order
    they finish; None once `deadline` passed (jobs in flight finish first). A job whose evaluator
    died twice (a crash in the task's code) gets an error row, retried with `retry_errors`."""
    todo = list(reversed(jobs))
    late = False

    def take() -> tuple | None:
        nonlocal late
        late = late or bool(deadline and time.monotonic() > deadline)
        return todo.pop() if todo and not late else None

    def work(job: tuple) -> dict[str, Any]:
        return svc.call(_baseline_job, *job, priority=PRIORITY_BENCH).result()

    for job, row in in_flight(width, take, work, name="baselines"):
        error = row.exception()
        yield _error_row(job[0], job[1], f"a baseline worker died (crash in the task's code?): {error}") \
            if error else row.result()
    if late and todo:
        yield None


def _error_row(task: Task, device: str, error: str) -> dict[str, Any]:
    return {"task": task.name, "level": task.level, "problem_id": task.problem_id, "task_sha256": task.sha256,
            "device": device, "torch": torch.__version__, "eager": None, "compile": None, "error": error}


def baseline_row(task: Task, device: str, config: EvalConfig, timer: BaselineTimer,
                 published: dict[tuple[int, str], float], roofline: bool = True) -> dict[str, Any]:
    row: dict[str, Any] = {"task": task.name, "level": task.level, "problem_id": task.problem_id,
                           "task_sha256": task.sha256, "device": device, "torch": torch.__version__,
                           "eager": None, "compile": None}
    t0 = time.perf_counter()
    try:
        eager, compiled = timer(task, config)
        row.update(eager=asdict(eager), compile=asdict(compiled))
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"[:500]
    row["seconds"] = time.perf_counter() - t0
    if roofline:
        row["roofline"] = roofline_for(task, device)
    if task.level is not None and (task.level, task.name) in published:
        row["published_eager_ms"] = published[(task.level, task.name)]
    return row


def _spread(stats: dict[str, Any] | None) -> str:
    if not stats:
        return "–"
    return f"{ms(stats['median_ms'])} ±{ms(stats.get('iqr_ms'))}"


def baselines_markdown(rows: list[dict[str, Any]], title: str = "Baselines") -> str:
    """The baseline table: per task eager and compile medians with IQR, SOL time and fractions,
    and our eager median over the published eager mean; one summary line per level first."""
    rows = sorted(rows, key=lambda r: (r.get("level") or 0, r.get("problem_id") or 0, r["task"]))
    roof_dev = next((r["roofline"]["device"] for r in rows if (r.get("roofline") or {}).get("device")), "?")
    lines = [f"# {title}", "", f"Device: {roof_dev}; torch {rows[0]['torch'] if rows else '?'}. Times: median "
             "± interquartile range, ms. SOL: speed-of-light time from measured peaks. 'vs published': our "
             "eager median / the published eager mean (a different PyTorch, no L2 flush, wall clock).", "",
             "| level | tasks | timed | compile faster | geomean eager/compile | median SOL% eager | "
             "median SOL% compile | geomean vs published |", "|---|--:|--:|--:|--:|--:|--:|--:|"]
    levels = sorted({r.get("level") for r in rows}, key=lambda v: (v is None, v or 0))
    for level in levels:
        group = [r for r in rows if r.get("level") == level]
        timed = [r for r in group if r.get("eager") and r.get("compile")]
        ratio = metrics.geomean(r["eager"]["median_ms"] / r["compile"]["median_ms"] for r in timed)
        faster = sum(r["compile"]["median_ms"] < r["eager"]["median_ms"] for r in timed)
        vs_pub = metrics.geomean(r["eager"]["median_ms"] / r["published_eager_ms"] for r in timed
                                 if r.get("published_eager_ms"))
        lines.append(f"| {level} | {len(group)} | {len(timed)} | {faster} | {times(ratio)} | "
                     f"{pct(metrics.median_sol_fraction(group, 'eager'))} | "
                     f"{pct(metrics.median_sol_fraction(group, 'compile'))} | {times(vs_pub)} |")
    lines += ["", "| level | id | task | eager ms | compile ms | eager/compile | SOL ms | bound | SOL% eager | "
              "SOL% compile | published eager ms | vs published | error |",
              "|--:|--:|---|--:|--:|--:|--:|---|--:|--:|--:|--:|---|"]
    for r in rows:
        roof = r.get("roofline") or {}
        e, c = r.get("eager"), r.get("compile")
        ratio = e["median_ms"] / c["median_ms"] if e and c else None
        pub = r.get("published_eager_ms")
        vs_pub = e["median_ms"] / pub if e and pub else None
        err = (r.get("error") or roof.get("error") or "").replace("|", "\\|")[:80]
        lines.append(f"| {r.get('level') or ''} | {r.get('problem_id') or ''} | {r['task']} | {_spread(e)} | "
                     f"{_spread(c)} | {times(ratio)} | {ms(roof.get('sol_ms'))} | {roof.get('bound', '–')} | "
                     f"{pct(metrics.sol_fraction(r, 'eager'))} | {pct(metrics.sol_fraction(r, 'compile'))} | "
                     f"{ms(pub)} | {times(vs_pub)} | {err} |")
    return "\n".join(lines) + "\n"


def write_baselines_table(jsonl_path: str | Path, tasks: list[Task] | None = None) -> Path:
    """Render `jsonl_path` (only `tasks`, if given) as Markdown beside it; returns the .md path."""
    jsonl_path = Path(jsonl_path)
    rows = list(latest_by(read_rows(jsonl_path), "task").values())
    if tasks is not None:
        names = {t.name for t in tasks}
        rows = [r for r in rows if r["task"] in names]
    md = jsonl_path.with_suffix(".md")
    md.write_text(baselines_markdown(rows, f"Baselines ({jsonl_path.name})"))
    return md
