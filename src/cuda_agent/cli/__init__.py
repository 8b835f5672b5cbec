"""The `cuda-agent` command: parses arguments, calls one library function per command, prints.

Each module here holds the commands of one part of the library (tasks.py: tasks and workspace;
evaluate.py: eval and the workspace's compile/verify/profile; agent.py: optimize and demo;
bench.py: bench, baselines and peaks; synth.py: synth; train.py: train, the RL stages; cache.py:
cache). Nothing below this layer prints for a person or parses a command line. A user's mistake,
wherever it is found (cuda_agent.usage.UsageError), is one line and exit status 2 (errors.py).
"""

from __future__ import annotations

import typer

from cuda_agent.cli.errors import UsageErrorsSaid

app = typer.Typer(help="LLM agents that write fast, verified CUDA kernels for PyTorch models.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode="rich", cls=UsageErrorsSaid)


def _register() -> None:
    from cuda_agent.cli import agent, bench, cache, evaluate, synth, tasks, train

    app.add_typer(tasks.tasks_app, name="tasks")
    app.command("workspace")(tasks.workspace)
    evaluate.register(app)
    app.command("optimize")(agent.optimize_command)
    app.command("demo")(agent.demo_command)
    bench.register(app)
    app.add_typer(synth.synth_app, name="synth")
    app.command("train")(train.train_command)
    app.add_typer(cache.cache_app, name="cache")


_register()


def main() -> None:
    app()
