"""The commands that live with their packages (harness, agent, bench), registered on the app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach each package's commands (imported here so `cli.py` stays thin)."""
    from cuda_agent.harness import commands as harness_commands

    harness_commands.register(app)
    from cuda_agent.agent.cli import demo_command, optimize_command

    app.command("optimize")(optimize_command)
    app.command("demo")(demo_command)
    from cuda_agent.bench.cli import register as register_bench

    register_bench(app)
    from cuda_agent.synth.cli import synth_app

    app.add_typer(synth_app, name="synth")
