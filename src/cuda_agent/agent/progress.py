"""Progress of runs: a live view (one task as a panel, many as a table), or nothing for scripts."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table


class Progress(Protocol):
    def update(self, task: str, **fields: Any) -> None:
        """New values for a task's row: status, turn, action, best, tokens, elapsed."""
        ...


class NoProgress:
    """For --quiet and --json: shows nothing."""

    def update(self, task: str, **fields: Any) -> None:
        pass

    def __enter__(self) -> "NoProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@dataclass
class _Row:
    status: str = "waiting"
    turn: int = 0
    action: str = ""
    best: str = "-"
    tokens: int = 0
    elapsed: float = 0.0


class LiveProgress:
    """A live terminal view, refreshed four times a second; safe to update from worker threads."""

    def __init__(self, tasks: list[str], console: Console | None = None, title: str = "cuda-agent"):
        self.rows = {t: _Row() for t in tasks}
        self.title = title
        self.console = console or Console(stderr=True)
        self._lock = threading.Lock()
        self._live = Live(console=self.console, get_renderable=self._render, refresh_per_second=4)

    def update(self, task: str, **fields: Any) -> None:
        with self._lock:
            row = self.rows.setdefault(task, _Row())
            for key, value in fields.items():
                setattr(row, key, value)

    def __enter__(self) -> "LiveProgress":
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()
        if not self.console.is_terminal:  # a terminal's cursor is already below the view
            self.console.line()

    def _render(self) -> Any:
        with self._lock:
            rows = {t: _Row(**vars(r)) for t, r in self.rows.items()}
        if len(rows) == 1:
            (task, r), = rows.items()
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold")
            grid.add_column()
            for label, value in (("task", task), ("status", r.status), ("turn", str(r.turn)),
                                 ("last action", r.action), ("best verified", r.best),
                                 ("tokens", f"{r.tokens:,}"), ("time", _time(r.elapsed))):
                grid.add_row(label, value)
            return Panel(grid, title=self.title, expand=False)
        table = Table(title=self.title)
        for column in ("task", "status", "turn", "last action", "best verified", "tokens", "time"):
            table.add_column(column, no_wrap=column != "last action")
        for task, r in rows.items():
            table.add_row(task, r.status, str(r.turn), r.action, r.best, f"{r.tokens:,}", _time(r.elapsed))
        done = sum(r.status not in ("waiting", "running") for r in rows.values())
        return Group(table, f"{done}/{len(rows)} finished")


def _time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"
