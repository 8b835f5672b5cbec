"""The `bench`, `baselines` and `peaks` commands (registered by cli/__init__.py): parse, call
bench/run.py, bench/baselines.py, bench/peaks.py, print."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from cuda_agent.cli.errors import err as errors
from cuda_agent.cli.errors import fail, positive
from cuda_agent.devices import check_device
from cuda_agent.tasks import Task, TaskError, load_tasks
from cuda_agent.usage import UsageError, output_file, output_folder, require

console = Console()

PLOTS_INSTALL = "pip install matplotlib (a dependency of cuda-agent: `bash scripts/setup.sh` installs it)"
SOURCE = "Tasks: a KernelBench checkout, a .jsonl/.parquet dataset, a folder of tasks, a .py task, or `examples`."


def select_tasks(source: str, levels: list[int] | None, ids: list[int] | None, name: str | None) -> list[Task]:
    """The tasks of `source` in the given levels (all if none), ids and name pattern."""
    ts = load_tasks(source).select(ids=ids, pattern=name)
    for e in ts.errors:
        errors.print(f"[yellow]skipped[/] {e}", highlight=False)
    tasks = [t for t in ts.tasks if not levels or t.level in levels]
    if not tasks:
        raise TaskError(source, "no task matches --level/--id/--name")
    return tasks


def _say_missing(missing: list[Task], selected: int, solutions: Path) -> None:
    if missing:
        names = ", ".join(t.name for t in missing[:5]) + (", ..." if len(missing) > 5 else "")
        errors.print(f"[yellow]warning:[/] {len(missing)} of {selected} tasks have no solution in {solutions} and "
                     f"score 'no solution' (reward -1): {names}", highlight=False)


def report_meta(out: Path, source: str, rows: list[dict[str, Any]]) -> dict[str, str]:
    import torch

    settings = json.loads((out / "bench.json").read_text()).get("mode", {}) if (out / "bench.json").is_file() else {}
    device = next((r["roofline"]["device"] for r in rows if (r.get("roofline") or {}).get("device")),
                  settings.get("device", "?"))
    what = f"solutions {settings['solutions']}" if settings.get("solutions") else f"agent {settings.get('model')}"
    return {"source": source, "scored": what, "device": device, "torch": torch.__version__,
            "policy": str(settings.get("policy", "?")), "written": time.strftime("%Y-%m-%d %H:%M")}


def _row_line(row: dict[str, Any]) -> str:
    color = "green" if row.get("correct") else "red"
    speed = ""
    if row.get("speedup_vs_eager") is not None:
        speed = f"  {row['speedup_vs_eager']:.2f}x eager, {row.get('speedup_vs_compile') or 0:.2f}x compile"
    reason = "" if row.get("correct") else f"  {str(row.get('reason', ''))[:90]}"
    level = f"L{row['level']} " if row.get('level') is not None else ""
    return f"{level}{row['task']}  [{color}]reward {row.get('reward', 0):g}[/]{speed}{reason}"


def _print_summary(summaries: list) -> None:
    t = Table(title="summary (rates over all tasks; geomean with failures as 1.0x)")
    for col in ("group", "tasks", "pass", "> eager", "> compile +5%", "geomean vs eager", "geomean vs compile"):
        t.add_column(col, justify="left" if col == "group" else "right")
    for s in summaries:
        t.add_row(s.group, str(s.tasks), f"{s.pass_rate:.1%}", f"{s.faster_eager:.1%}", f"{s.faster_compile_margin:.1%}",
                  f"{s.geomean_eager:.2f}x" if s.geomean_eager else "–",
                  f"{s.geomean_compile:.2f}x" if s.geomean_compile else "–")
    console.print(t)


def bench_command(
    tasks: Annotated[str, typer.Option("--tasks", help=SOURCE)],
    out: Annotated[Path, typer.Option(help="Folder for results.jsonl, report.md and report.html; "
                                      "running again resumes.")],
    solutions: Annotated[Optional[Path], typer.Option(help="Score existing solutions: one folder or file per "
                                                      "task (`DIR/NAME/`, `DIR/NAME.py`, or KernelBench's "
                                                      "`level_L_problem_P_sample_S_kernel.py`).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Run the agent with this model on each "
                                                 "task instead (endpoint from $OPENAI_BASE_URL).")] = None,
    level: Annotated[Optional[list[int]], typer.Option(help="Only these levels (repeat for several).")] = None,
    ids: Annotated[Optional[list[int]], typer.Option("--id", help="Only these problem ids.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Only names matching this glob or substring.")] = None,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda where there is a GPU).")] = None,
    gpus: Annotated[Optional[int], typer.Option(min=1, help="Use at most this many GPUs.")] = None,
    per_gpu: Annotated[int, typer.Option("--per-gpu", min=1, help="Evaluators sharing each GPU (CUDA): they build, "
                                         "start and check correctness side by side and take the GPU alone to time, "
                                         "so no two timings overlap. One H200 gave the demo task 2,229-2,687 "
                                         "evaluations/h with 3 (2026-11-29), about 1,400/h with 1.")] = 1,
    address: Annotated[Optional[str], typer.Option(help="A Ray cluster to run the evaluation service on "
                                                   "(default: $RAY_ADDRESS, else a local Ray started for the run).")] = None,
    policy: Annotated[str, typer.Option(help="strict (the paper's rules) or relaxed (KernelBench's).")] = "strict",
    restart: Annotated[bool, typer.Option(help="Discard the results already in --out.")] = False,
    max_seconds: Annotated[Optional[float], typer.Option(min=0.0, help="Start no task after this many "
                                                         "seconds (run again to go on).")] = None,
    roofline: Annotated[bool, typer.Option(help="Count FLOPs and bytes for speed-of-light numbers.")] = True,
    report_only: Annotated[bool, typer.Option(help="Only write the report from results.jsonl.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No line per task.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summaries as JSON.")] = False,
) -> None:
    """Evaluate solutions (or the agent) on many tasks; write results.jsonl and a report.

    How long: about one evaluation per task (seconds on a GPU once built and baselined; level-3
    models up to minutes), spread over the evaluators (--gpus x --per-gpu); a killed run resumes where it
    stopped."""
    from cuda_agent.bench.report import write_report
    from cuda_agent.bench.run import BenchError, BenchSpec, report_rows, run_bench
    from cuda_agent.bench.solutions import SolutionsDir
    from cuda_agent.harness import POLICIES, EvalConfig
    from cuda_agent.service import ServiceError, ServiceSettings

    try:
        if policy not in POLICIES:
            raise UsageError(f"--policy {policy}: use strict or relaxed")
        output_folder(out, "--out")
        require("matplotlib", "bench draws its report's plots", PLOTS_INSTALL)
        if not report_only:
            if (solutions is None) == (model is None):
                raise BenchError("give exactly one of --solutions DIR (score existing solutions) and --model NAME")
            dev = check_device(device)
            if per_gpu > 1 and dev != "cuda":
                raise UsageError(f"--per-gpu {per_gpu} is for CUDA devices; on the CPU one evaluator runs, as its "
                                 "timing would share the cores that the others compile and check on")
            selected = select_tasks(tasks, level, ids, name)
            if solutions is not None:
                _say_missing(SolutionsDir(solutions).missing(selected), len(selected), solutions)
            spec = BenchSpec(device=dev, eval_config=EvalConfig(device=dev, policy=policy), roofline=roofline,
                             solutions=solutions.resolve() if solutions else None, model=model)
            settings = ServiceSettings(address=address, device=dev, gpus=gpus, evaluators_per_device=per_gpu)
            if not quiet and not json_out:
                console.print(f"bench: {len(selected)} tasks on {dev} -> {out}", highlight=False)
            show = None if quiet or json_out else (lambda r: console.print(_row_line(r), highlight=False))
            run = run_bench(selected, spec, out, settings=settings, restart=restart, max_seconds=max_seconds,
                            on_row=show)
            if not json_out:
                console.print(f"{run.evaluated} evaluated, {run.skipped} already done"
                              f"{'; stopped at --max-seconds: run again to go on' if run.stopped_early else ''}")
        rows = report_rows(out)
        if not rows:
            raise BenchError(f"{out}/results.jsonl has no results to report")
        rep = write_report(rows, out, report_meta(out, tasks, rows))
    except (UsageError, ServiceError, OSError) as e:
        fail(str(e))
    if json_out:
        print(json.dumps([s.to_dict() for s in rep.summaries]))
    else:
        _print_summary(rep.summaries)
        console.print(f"report: {out / 'report.html'}  {out / 'report.md'}  {out / 'results.jsonl'}", highlight=False)


def baselines_command(
    tasks: Annotated[str, typer.Option("--tasks", help=SOURCE)],
    out: Annotated[Path, typer.Option(help="JSONL file of timings (appended, resumable); the table is "
                                      "written beside it as .md.")],
    level: Annotated[Optional[list[int]], typer.Option(help="Only these levels (repeat for several).")] = None,
    ids: Annotated[Optional[list[int]], typer.Option("--id", help="Only these problem ids.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Only names matching this glob or substring.")] = None,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda where there is a GPU).")] = None,
    published: Annotated[Optional[Path], typer.Option(help="Published eager timings to compare with (a "
                                                      "KernelBench timing JSON).")] = None,
    max_seconds: Annotated[Optional[float], typer.Option(min=0.0, help="Time no new task after this "
                                                         "many seconds (run again to go on).")] = None,
    retry_errors: Annotated[bool, typer.Option(help="Time again the tasks whose timing failed.")] = False,
    roofline: Annotated[bool, typer.Option(help="Count FLOPs and bytes for speed-of-light numbers.")] = True,
    table_only: Annotated[bool, typer.Option(help="Only write the table from the JSONL file.")] = False,
    address: Annotated[Optional[str], typer.Option(help="A Ray cluster to run the evaluation service on "
                                                   "(default: $RAY_ADDRESS, else a local Ray started for the run).")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Evaluators at once on each device: each compiles on its own "
                                         "and takes the device only to time.")] = 1,
    budget: Annotated[float, typer.Option(callback=positive, help="Timing budget per model in seconds (the "
                                          "harness's default is 2; baselines are cached per budget).")] = 2.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No line per task.")] = False,
) -> None:
    """Time eager and torch.compile per task, with speed-of-light numbers; resumable.

    How long: torch.compile's first compile dominates, seconds to a minute per task (level 3 the most)."""
    from cuda_agent.bench.baselines import baselines, published_times, write_baselines_table
    from cuda_agent.harness import EvalConfig, TimingPlan
    from cuda_agent.service import EvalService, ServiceError, ServiceSettings

    try:
        output_file(out, "--out")
        dev = None if table_only else check_device(device)
        selected = select_tasks(tasks, level, ids, name)
        published_ms = published_times(published)
        if dev is not None:

            def show(r: dict[str, Any]) -> None:
                e, c = r.get("eager"), r.get("compile")
                timing = f"eager {e['median_ms']:.4f} ms, compile {c['median_ms']:.4f} ms" if e and c else \
                    f"[red]{r.get('error')}[/]"
                sol = (r.get("roofline") or {}).get("sol_ms")
                level = f"L{r['level']} " if r.get("level") is not None else ""
                console.print(f"{level}{r['task']}  {timing}" + (f", SOL {sol:.4f} ms" if sol else ""),
                              highlight=False)

            settings = ServiceSettings(address=address, device=dev, cpu_evaluators=workers,
                                       evaluators_per_device=workers)
            with EvalService(settings) as svc:
                run = baselines(selected, dev, out, config=EvalConfig(device=dev, timing=TimingPlan(budget_s=budget)),
                                published=published_ms, max_seconds=max_seconds,
                                retry_errors=retry_errors, roofline=roofline, on_row=None if quiet else show,
                                service=svc)
            console.print(f"{run.timed} timed ({run.failed} failed), {run.selected - run.timed} already done or left"
                          f"{'; stopped at --max-seconds: run again to go on' if run.stopped_early else ''}")
        md = write_baselines_table(out, selected)
    except (UsageError, ServiceError, OSError) as e:
        fail(str(e))
    console.print(f"table: {md}", highlight=False)


def peaks_command(
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda where there is a GPU).")] = None,
    remeasure: Annotated[bool, typer.Option(help="Measure again instead of reading the cache.")] = False,
) -> None:
    """Measure (once, then cached) the device's peak FLOP/s and bandwidth used for speed-of-light times."""
    from cuda_agent.bench.peaks import cache_path, device_peaks

    dev = check_device(device)
    peaks = device_peaks(dev, remeasure=remeasure)
    console.print(peaks.summary(), highlight=False)
    for note in peaks.notes:
        console.print(f"  note: {note}", highlight=False)
    console.print(f"cached in {cache_path(dev)}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_command)
    app.command("baselines")(baselines_command)
    app.command("peaks")(peaks_command)
