"""`cuda-agent tasks list|show` and `cuda-agent workspace`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from cuda_agent.cli.errors import err, fail
from cuda_agent.tasks import TaskError, load_task, load_tasks

tasks_app = typer.Typer(help="List and show tasks from any source.", no_args_is_help=True)
out = Console()

MAX_SKIPPED_SHOWN = 5
SOURCE_HELP = ("a .py task, a folder of tasks, a KernelBench checkout, a .jsonl/.parquet dataset, "
               "or `examples` (the bundled ones)")


@tasks_app.command("list")
def tasks_list(source: str = typer.Argument(..., help=SOURCE_HELP),
               level: Optional[int] = typer.Option(None, help="only this KernelBench level"),
               ids: Optional[list[int]] = typer.Option(None, "--id", help="only these problem ids"),
               name: Optional[str] = typer.Option(None, help="name glob (`*conv*`) or substring"),
               as_json: bool = typer.Option(False, "--json", help="one JSON object per task per line")) -> None:
    """List the tasks of SOURCE (bad files or rows are reported, the good ones listed)."""
    try:
        ts = load_tasks(source).select(level=level, ids=ids, pattern=name)
    except TaskError as e:
        fail(str(e))
    for e in ts.errors[:MAX_SKIPPED_SHOWN]:
        err.print(f"[yellow]skipped[/] {e}", highlight=False)
    if len(ts.errors) > MAX_SKIPPED_SHOWN:
        err.print(f"[yellow]skipped[/] {len(ts.errors) - MAX_SKIPPED_SHOWN} more", highlight=False)
    if not ts.tasks and not as_json:
        fail(f"{source}: no task matches" if level or ids or name else f"{source}: no tasks in it")
    if as_json:
        for t in ts.tasks:
            print(json.dumps(t.summary()))
        return
    table = Table(title=f"{len(ts.tasks)} tasks from {source}")
    for col in ("level", "id", "name", "lines"):
        table.add_column(col, justify="right" if col != "name" else "left")
    for t in ts.tasks:
        table.add_row(str(t.level or ""), str(t.problem_id or ""), t.name, str(t.code.count("\n") + 1))
    out.print(table)


@tasks_app.command("show")
def tasks_show(source: str = typer.Argument(..., help=SOURCE_HELP),
               task: str = typer.Argument(..., help="name, L<level>/<id>, or a unique name prefix"),
               as_json: bool = typer.Option(False, "--json")) -> None:
    """Print one task: its record and its code."""
    try:
        t = load_tasks(source).find(task)
    except (TaskError, KeyError) as e:
        fail(e)
    if as_json:
        print(json.dumps(t.to_dict()))
        return
    out.print(f"[bold]{t.name}[/]  level={t.level} id={t.problem_id}  origin={t.origin}", highlight=False)
    from rich.syntax import Syntax

    out.print(Syntax(t.code, "python", line_numbers=True))


def workspace(task: str = typer.Argument(..., help="a .py task file, or a task name looked up in --source"),
              dest: Path = typer.Argument(..., help="the folder to create"),
              source: Optional[str] = typer.Option(None, help=SOURCE_HELP),
              device: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda if a GPU is present)"),
              force: bool = typer.Option(False, help="replace DEST if it exists")) -> None:
    """Create the workspace in which an agent writes the fast version of TASK."""
    from cuda_agent.devices import check_device
    from cuda_agent.usage import output_folder
    from cuda_agent.workspace import create_workspace

    dev = check_device(device, present=False)   # a workspace may be made here for a GPU elsewhere
    output_folder(dest, "DEST")
    try:
        t = load_task(task, source)
        ws = create_workspace(t, dest, dev, overwrite=force)
    except (TaskError, KeyError, FileExistsError, ValueError) as e:
        fail(e)
    out.print(f"workspace for [bold]{t.name}[/] ({ws.device}) at {ws.path}", highlight=False)
    for p in sorted(ws.path.rglob("*")):
        if p.is_file() and ".cuda_agent" not in p.parts:
            out.print(f"  {p.relative_to(ws.path)}", highlight=False)
