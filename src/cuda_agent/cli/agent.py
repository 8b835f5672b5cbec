"""The `optimize` and `demo` commands (registered by cli/__init__.py): parse, call agent/run.py, print."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from cuda_agent.agent.config import load_config, override
from cuda_agent.agent.progress import LiveProgress, NoProgress
from cuda_agent.agent.report import RunResult
from cuda_agent.agent.run import demo, make_model, optimize, optimize_many
from cuda_agent.cli.errors import fail, positive
from cuda_agent.devices import check_device
from cuda_agent.harness import TimingPlan
from cuda_agent.llm import ModelError
from cuda_agent.service import EvalService, ServiceError, ServiceSettings
from cuda_agent.tasks import load_task, load_tasks
from cuda_agent.usage import UsageError, output_folder

console = Console()


def optimize_command(
    task: Annotated[Optional[str], typer.Argument(help="A task: a .py file, or a bundled example's name.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model name the endpoint serves "
                                                 "(default: $CUDA_AGENT_MODEL).")] = None,
    base_url: Annotated[Optional[str], typer.Option(help="OpenAI-compatible endpoint, e.g. "
                                                    "http://localhost:8000/v1 (default: $OPENAI_BASE_URL).")] = None,
    api_key: Annotated[Optional[str], typer.Option(help="API key (default: $OPENAI_API_KEY).")] = None,
    policy: Annotated[Optional[str], typer.Option(help="`replay:FILE` re-issues a recorded run's tool calls "
                                                  "instead of asking a model.")] = None,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda where there is a GPU).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default: runs/TASK-TIME; with --tasks, "
                                                "runs/TIME with a folder per task).")] = None,
    tasks: Annotated[Optional[str], typer.Option(help="Many tasks: a folder, a KernelBench checkout, a "
                                                 ".jsonl/.parquet dataset, or `examples`.")] = None,
    level: Annotated[Optional[int], typer.Option(help="With --tasks: only this level.")] = None,
    pattern: Annotated[Optional[str], typer.Option(help="With --tasks: names matching this glob or substring.")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="With --tasks: at most this many tasks.")] = None,
    parallel: Annotated[int, typer.Option(min=1, help="With --tasks: tasks run at once.")] = 1,
    address: Annotated[Optional[str], typer.Option(help="A Ray cluster to run the evaluation service on "
                                                   "(default: $RAY_ADDRESS, else a local Ray started for the run).")] = None,
    max_turns: Annotated[Optional[int], typer.Option(min=1, help="Turns budget (default 150).")] = None,
    max_seconds: Annotated[Optional[float], typer.Option(callback=positive, help="Wall-clock budget per task.")] = None,
    max_context_tokens: Annotated[Optional[int], typer.Option(min=1, help="Context budget (default 128000).")] = None,
    tool_protocol: Annotated[Optional[str], typer.Option(help="native, or text for endpoints without tool "
                                                         "calling.")] = None,
    timing_budget: Annotated[Optional[float], typer.Option(callback=positive, help="Seconds of timed calls per "
                                                           "model when the agent profiles (default 2).")] = None,
    config: Annotated[Optional[Path], typer.Option(help="A TOML file over the bundled agent config.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run recorded in --out.")] = False,
    force: Annotated[bool, typer.Option(help="Start over in a non-empty --out.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live view; one line at the end.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="No live view; the report as JSON.")] = False,
) -> None:
    """Let a model write fast, verified kernels for a task (or many with --tasks).

    How long: up to --max-turns turns of one model call each, plus a few seconds to a minute for
    each compile, verify or profile the model asks for (a first build is the slow one)."""
    try:
        if task is None and tasks is None:
            raise UsageError("give a TASK, or --tasks SOURCE for many")
        if out is not None:
            output_folder(out, "--out")
        device = check_device(device) if device else None   # a resumed run keeps its own device
        cfg = override(load_config(config), limits={"max_turns": max_turns, "max_seconds": max_seconds,
                                                    "max_context_tokens": max_context_tokens},
                       model={"protocol": tool_protocol})
        options = dict(model=model, base_url=base_url, api_key=api_key, policy=policy, device=device,
                       config=cfg, resume=resume, force=force, timing=TimingPlan().with_budget(timing_budget))
        make_model(policy, model, base_url, api_key, cfg, check=True)  # a missing or dead endpoint: said first
        if tasks is None:
            one = load_task(task)  # the view's row is keyed by the task's name, as optimize reports it
            with _progress([one.name], quiet or json_out) as progress:
                with EvalService(ServiceSettings(address=address, device=device)) as svc:
                    results = [optimize(one, out=out, progress=progress, service=svc, **options)]
        else:
            selected = load_tasks(tasks).select(level=level, pattern=pattern).tasks[:limit]
            if not selected:
                raise UsageError(f"no task in {tasks} matches --level/--pattern")
            folder = out or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
            with _progress([t.name for t in selected], quiet or json_out) as progress:
                with EvalService(ServiceSettings(address=address, device=device)) as svc:
                    results = optimize_many(selected, out=folder, parallel=parallel, progress=progress, service=svc,
                                            **options)
    except (UsageError, ModelError, ServiceError, OSError, KeyError) as e:
        fail(e)
    _print(results, json_out, many=tasks is not None)
    raise typer.Exit(1 if any(r.status in ("model_error", "error") for r in results) else 0)


def demo_command(
    json_out: Annotated[bool, typer.Option("--json", help="The report as JSON, no live view.")] = False,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda where there is a GPU).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default: a new temporary one).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Ask this model instead of replaying "
                                                 "the bundled run.")] = None,
    base_url: Annotated[Optional[str], typer.Option(help="The model's endpoint, e.g. http://localhost:8000/v1.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live view.")] = False,
) -> None:
    """Run the whole loop on the bundled example with a bundled trajectory, and print the verified result.

    How long: about 1-2 minutes on 2 CPU cores (most of it the first build and the baselines)."""
    try:
        device = check_device(device)
        if out is not None:
            output_folder(out, "--out")
        with _progress(["scale_bias_relu"], quiet or json_out, title="cuda-agent demo") as progress:
            result = demo(device=device, out=out, model=model, base_url=base_url, progress=progress)
    except (UsageError, ModelError, ServiceError, OSError) as e:
        fail(str(e))
    _print([result], json_out, many=False)
    raise typer.Exit(0 if result.correct else 1)


def _progress(names: list[str], off: bool, title: str = "cuda-agent") -> LiveProgress | NoProgress:
    return NoProgress() if off else LiveProgress(names, title=title)


def _print(results: list[RunResult], as_json: bool, many: bool) -> None:
    if as_json:
        data = [r.to_dict() for r in results]
        console.print_json(json.dumps(data if many else data[0], default=str))
        return
    for r in results:
        style = "green" if r.correct else "red"
        console.print(f"[bold]{r.task}[/bold]: [{style}]{r.headline()}[/{style}]")
        console.print(f"  {r.turns} turns, {r.tokens:,} tokens, {r.seconds:.0f} s; "
                      f"report: {Path(r.out) / 'report.md'}" + (f"; solution: {r.solution}" if r.solution else ""))
        if r.error:
            console.print(f"  [red]{r.error}[/red]")
