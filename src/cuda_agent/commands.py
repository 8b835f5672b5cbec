"""The commands that live with their packages (harness, agent, bench), registered on the app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach each package's commands; a package that is not importable yet is skipped."""
    from cuda_agent.harness import commands as harness_commands

    harness_commands.register(app)
