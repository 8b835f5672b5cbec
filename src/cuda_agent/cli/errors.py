"""How the command line says a user's mistake: one line on stderr, `error: ...`, exit status 2.

`fail` is for a command's own checks. `UsageErrorsSaid` is the `cuda-agent` app's group: a
UsageError raised anywhere below a command (a validator, a config file, the library) becomes that
one line. Any other exception is the program's own bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from cuda_agent.usage import UsageError

USAGE_EXIT = 2
err = Console(stderr=True, soft_wrap=True)


def fail(message: str | Exception) -> NoReturn:
    """Say `message` (or an exception's) as the user's mistake, in one line, and exit with status 2."""
    if isinstance(message, KeyError) and message.args:   # str(KeyError) is the key's repr, quoted
        message = str(message.args[0])
    err.print(f"[bold red]error:[/] {escape(' '.join(str(message).split()))}", highlight=False)
    raise typer.Exit(USAGE_EXIT)


class UsageErrorsSaid(TyperGroup):
    """The top-level group: a UsageError from any command is one line, never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as e:
            fail(str(e))


def positive(value: float | None) -> float | None:
    """A typer callback for an amount that must be more than 0 (seconds, a budget)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value:g} is not more than 0")
    return value
