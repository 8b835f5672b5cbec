"""`cuda-agent train STAGE --config RUN.yaml [key=value ...]`: the RL stages on verl (cuda_agent/rl/driver/train.py).

Registered by cli/__init__.py. Parses, calls `run_one` or `run_all`, shows progress, prints the
result; every user error is one message and exit code 2, a failed verl run exit code 1.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console()
errors = Console(stderr=True, soft_wrap=True)
CHOICES = ("warmup", "collect", "rft", "collect_rft", "value", "agentic", "all", "sanity", "fill_rft", "fill",
           "fill_agentic_rft", "fill_collect", "fill_agentic")
SHOWN = ("critic/score/mean", "actor/entropy", "critic/vf_loss", "train/loss")


def train_command(
    stage: Annotated[str, typer.Argument(help="warmup, collect, rft, collect_rft, value, agentic; all (these in "
                                         "order, each from the previous ones' results); or sanity (a plumbing "
                                         "smoke test: the letter-choice family); fill_rft, fill (the fill-the-kernel family: "
                                         "RFT on correct examples, then PPO); fill_agentic_rft, fill_collect, fill_agentic "
                                         "(its multi-turn form in the agent loop: RFT on scripted demonstrations, "
                                         "measured, then trained).")],
    overrides: Annotated[Optional[list[str]], typer.Argument(
        help="verl overrides, key=value (to every stage whose config has the key) or STAGE:key=value.")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="The run's YAML file (out, model, tasks, "
                                                   "...; see cuda_agent/rl/driver/config/run.example.yaml).")] = None,
    redo: Annotated[bool, typer.Option(help="Run STAGE again from scratch (its folder is deleted first).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print verl's output as it comes.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live view; one line per stage.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="No live view; the stages' results as JSON.")] = False,
) -> None:
    """Train the policy with verl: warm-up PPO, rejection fine-tuning, value pretraining, agentic PPO.

    How long: verl starts in 1-2 minutes; a fill PPO step (16 prompts x 4 replies, SmolLM2-135M) about
    40 s on an H200; `train all` with the tiny model on the CPU minutes a stage. Stages resume."""
    if stage not in CHOICES:
        _fail(f"unknown stage {stage!r}: use one of {', '.join(CHOICES)}")
    if config is None:
        _fail("--config RUN.yaml is required: the run's out folder, model and tasks (see "
              "cuda_agent/rl/driver/config/run.example.yaml)")
    if redo and stage == "all":
        _fail("--redo takes one stage (`train warmup --redo`), not all")
    from cuda_agent.rl.driver.stages import TrainError, load_run_config   # without verl: the run file is read first

    try:
        run = load_run_config(config)
    except TrainError as e:
        _fail(str(e))
    try:
        from cuda_agent.rl.driver.launch import Terminated
        from cuda_agent.rl.driver.train import run_all, run_one
    except ImportError as e:
        _fail(f"cuda-agent train needs the rl extra ({e.name} is missing): pip install -e '.[rl]'")
    view = _View(quiet or json_out, verbose and not json_out)
    try:
        with view:
            results = run_all(run, overrides or [], view.report) if stage == "all" else [
                run_one(run, stage, overrides or [], view.report, redo=redo)]
    except TrainError as e:
        errors.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        raise typer.Exit(1 if getattr(e, "failed_run", False) else 2) from None
    except KeyboardInterrupt:
        errors.print("interrupted; run the same command again to resume from the last checkpoint")
        raise typer.Exit(130) from None
    except Terminated as e:
        errors.print(f"{e}: verl and its workers were stopped; run the same command again to resume from "
                     "the last checkpoint")
        raise typer.Exit(128 + e.signum) from None
    if json_out:
        console.print_json(json.dumps([asdict(r) for r in results], default=str))
    else:
        console.print(f"plots: {run.out / 'plots'}; journal: {run.out / 'stages.jsonl'}")


def _fail(message: str) -> None:
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(2)


class _View:
    """Progress as verl reports it: a bar per stage (steps), its phase, and the latest metrics."""

    def __init__(self, off: bool, verbose: bool):
        self.off, self.verbose = off, verbose
        self.progress = Progress(TextColumn("[bold]{task.fields[stage]}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console,
                                 transient=False, disable=off)
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> "_View":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def _task(self, stage: str) -> Any:
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(stage, stage=stage, status="", total=None)
        return self.tasks[stage]

    def report(self, event: dict[str, Any]) -> None:
        kind, stage = event["event"], event.get("stage")
        if kind == "line":
            if self.verbose:
                self.progress.console.print(event["text"], markup=False, highlight=False)
            return
        if kind == "stage":
            self._current = stage
            self._task(stage)
            self._print(f"[bold]{stage}[/]: {event['summary']}")
        elif kind in ("phase", "note"):
            stage = stage or getattr(self, "_current", None)
            if stage and kind == "phase":
                self.progress.update(self._task(stage), status=escape(event["text"]), total=event.get("total"))
            elif kind == "note":
                self._print(f"  {escape(event['text'])}")
        elif kind == "step":
            shown = "  ".join(f"{k.split('/')[-2] if k.count('/') > 1 else k}={v:.3g}"
                              for k in SHOWN if (v := event["metrics"].get(k)) is not None)
            self.progress.update(self._task(stage), completed=event["step"], total=event.get("total"), status=shown)
        elif kind == "done":
            if event.get("skipped"):
                self._print(f"[bold]{stage}[/]: finished before; skipped (--redo runs it again)")
            else:
                outputs = escape(", ".join(f"{k}: {v}" for k, v in event["outputs"].items() if k != "checkpoint"))
                self._print(f"[bold green]{stage}[/]: done in {event['seconds']:.0f} s" + (f"; {outputs}" if outputs else ""))

    def _print(self, text: str) -> None:
        if not self.off:
            self.progress.console.print(text, highlight=False)
        elif text.startswith("[bold green]") or "skipped" in text:
            errors.print(text, highlight=False)
