"""Harness commands: `eval`, and the workspace's compile / verify / profile entry points."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from cuda_agent.cli.errors import fail, positive
from cuda_agent.harness import BuildResult, EvalConfig, EvalResult, TimingPlan
from cuda_agent.usage import UsageError

out = Console()


def render(result: EvalResult) -> None:
    """A verdict a person reads in two seconds."""
    color = "green" if result.correct else "red"
    out.print(f"[bold]{result.task}[/]  reward [bold {color}]{result.reward:g}[/]  ({result.milestone}, "
              f"stopped at {result.stage}, {result.device}, {result.seconds:.1f}s)", highlight=False)
    out.print(f"  {result.reason}", highlight=False)
    for f in result.findings[:8]:
        out.print(f"  [red]-[/] {f}", highlight=False)
    if result.build and not result.build.ok and result.build.errors:
        out.print(result.build.errors, highlight=False, markup=False)
    if result.solution:
        t = Table(box=None, pad_edge=False)
        for c in ("", "median ms", "IQR ms", "min ms", "runs", "windows", "window spread", "speed-up"):
            t.add_column(c, justify="right")
        for name, s, sp in (("eager", result.eager, None), ("torch.compile", result.compile, None),
                            ("solution", result.solution, None)):
            if s is None:
                continue
            ratio = "" if name != "solution" else \
                f"{result.speedup_vs_eager:.2f}x eager, {result.speedup_vs_compile:.2f}x compile"
            t.add_row(name, f"{s.median_ms:.4f}", f"{s.iqr_ms:.4f}", f"{s.min_ms:.4f}", str(s.runs), str(s.windows),
                      f"{100 * s.window_spread:.1f}%", ratio)
        out.print(t)
        if result.paired:
            out.print(f"  {result.timing_line()}", highlight=False)
    if result.flags:
        out.print(f"  flags: {', '.join(result.flags)}", highlight=False)


def eval_command(task: str = typer.Option(..., help="a .py task, or a name looked up in --source"),
                 solution: Path = typer.Option(..., help="a workspace folder or a load_inline model_new.py"),
                 source: Optional[str] = typer.Option(None, help="task source to look TASK up in"),
                 device: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda if present)"),
                 policy: str = typer.Option("strict", help="strict (the paper's rules) or relaxed (KernelBench's)"),
                 trials: int = typer.Option(5, min=1, help="correctness input sets"),
                 profile: bool = typer.Option(True, help="time eager, torch.compile and the solution"),
                 timing_budget: float = typer.Option(2.0, callback=positive, help="seconds of timed calls per model"),
                 as_json: bool = typer.Option(False, "--json", help="print one JSON object")) -> None:
    """Compile, verify and time SOLUTION against TASK; print the verdict and the reward.

    How long: a first CUDA build 5-60 s (cached after), then a few seconds an evaluation on a GPU
    (the demo task: about 20 s the first time with its baselines, 2.4 s after, H200); on 2 CPU cores
    the first evaluation of a C++ solution about 30-60 s."""
    from cuda_agent.devices import check_device
    from cuda_agent.harness import POLICIES, evaluate
    from cuda_agent.tasks import load_task

    if policy not in POLICIES:
        fail(f"--policy {policy}: use strict or relaxed")
    if not solution.exists():
        fail(f"--solution {solution}: no such file or folder; give a workspace folder or a model_new.py")
    try:
        device = check_device(device)
        t = load_task(task, source)
    except (UsageError, KeyError) as e:
        fail(e)
    result = evaluate(t, solution, EvalConfig(device=device, policy=policy, correctness_trials=trials,
                                              profile=profile, timing=TimingPlan(budget_s=timing_budget)))
    if as_json:
        print(json.dumps(result.to_dict()))
    else:
        render(result)
    raise typer.Exit(0 if result.correct else 1)


def _workspace_eval(workspace: Path, profile: bool) -> None:
    from cuda_agent.harness import evaluate_workspace

    result = evaluate_workspace(workspace, EvalConfig(profile=profile))
    render(result)
    raise typer.Exit(0 if result.correct else 1)


def workspace_compile(workspace: Path = typer.Argument(..., help="the workspace folder")) -> None:
    """Build kernels/ into `cuda_extension` (cached) and put a copy in the workspace root."""
    from cuda_agent.harness import compile_solution
    from cuda_agent.workspace.manifest import ManifestError, read_manifest

    try:
        device = read_manifest(workspace)[0].device
    except ManifestError as e:
        fail(str(e))
    result: BuildResult = compile_solution(workspace, EvalConfig(device=device))
    if not result.ok:
        out.print("[bold red]compile failed[/]")
        out.print(result.errors, markup=False, highlight=False)
        raise typer.Exit(1)
    assert result.module_path
    shutil.copyfile(result.module_path, workspace / Path(result.module_path).name)
    out.print(f"[green]compiled[/] cuda_extension in {result.seconds:.2f}s "
              f"({result.compiled} compiled, {result.cached} from cache)")


def workspace_verify(workspace: Path = typer.Argument(..., help="the workspace folder")) -> None:
    """Check the workspace's solution: rules and correctness."""
    _workspace_eval(workspace, profile=False)


def workspace_profile(workspace: Path = typer.Argument(..., help="the workspace folder")) -> None:
    """Check and time the workspace's solution against eager and torch.compile; print the reward."""
    _workspace_eval(workspace, profile=True)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.command("workspace-compile", hidden=True)(workspace_compile)
    app.command("workspace-verify", hidden=True)(workspace_verify)
    app.command("workspace-profile", hidden=True)(workspace_profile)
