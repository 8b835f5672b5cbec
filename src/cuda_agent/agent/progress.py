"""Progress of runs: a live view (one task as a panel, many as a table), or nothing for scripts.

Rows are keyed by the task's name, the name `optimize` reports under. The view fits the terminal:
each task of many is a line of short columns (task, status, turn, time, tokens) that are never cut,
and under it the best verified solution and the last action, which wrap.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


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
class Row:
    status: str = "waiting"
    turn: int = 0
    action: str = ""
    best: str = "-"
    tokens: int = 0
    elapsed: float = 0.0


class LiveProgress:
    """A live terminal view, refreshed four times a second; safe to update from worker threads.
    `tasks`: the names of the tasks to come, shown as waiting until their first update."""

    def __init__(self, tasks: list[str], console: Console | None = None, title: str = "cuda-agent"):
        self.rows = {t: Row() for t in tasks}
        self.title = title
        self.console = console or Console(stderr=True)
        self._lock = threading.Lock()
        self._live = Live(console=self.console, get_renderable=self.render, refresh_per_second=4)

    def update(self, task: str, **fields: Any) -> None:
        with self._lock:
            row = self.rows.setdefault(task, Row())
            for key, value in fields.items():
                setattr(row, key, value)

    def __enter__(self) -> "LiveProgress":
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()
        if not self.console.is_terminal:  # a terminal's cursor is already below the view
            self.console.line()

    def render(self) -> Any:
        """What the view shows now."""
        with self._lock:
            rows = {t: Row(**vars(r)) for t, r in self.rows.items()}
        if len(rows) == 1:
            return _panel(self.title, *next(iter(rows.items())))
        return _ManyTasks(self.title, rows)


def _panel(title: str, task: str, r: Row) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in (("task", task), ("status", r.status), ("turn", str(r.turn)), ("last action", r.action),
                         ("best verified", r.best), ("tokens", f"{r.tokens:,}"), ("time", _time(r.elapsed))):
        grid.add_row(label, value)
    return Panel(grid, title=title, expand=False)


class _ManyTasks:
    """Many tasks, laid out for the width the console gives: a line of short columns per task, the
    task's name folded if it must be, and the task's best verdict and last action under it."""

    def __init__(self, title: str, rows: dict[str, Row]):
        self.title, self.rows = title, rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        columns = {"status": [r.status for r in self.rows.values()], "turn": [str(r.turn) for r in self.rows.values()],
                   "time": [_time(r.elapsed) for r in self.rows.values()],
                   "tokens": [f"{r.tokens:,}" for r in self.rows.values()]}
        widths = {name: max(len(name), *map(len, values)) for name, values in columns.items()}
        if options.max_width - sum(widths.values()) - 2 * len(widths) < 16:   # a narrow terminal: the sum only
            del columns["tokens"], widths["tokens"]
        fixed = sum(widths.values()) + 2 * len(widths)          # two spaces before each column
        name_width = max(8, min(max(map(len, self.rows)), options.max_width - fixed))

        def line(task: str, values: list[str], style: str = "") -> Text:
            cells = [v.ljust(widths[k]) if k == "status" else v.rjust(widths[k]) for k, v in zip(widths, values)]
            return Text(task.ljust(name_width) + "".join("  " + c for c in cells), style=style)

        parts: list[Any] = [Text(self.title, style="bold"), line("task", list(widths), style="bold")]
        for i, (task, r) in enumerate(self.rows.items()):
            head = [task[j:j + name_width] for j in range(0, len(task), name_width)]
            parts.append(line(head[0], [column[i] for column in columns.values()]))
            parts += [Text(rest) for rest in head[1:]]
            if r.status != "waiting":
                detail = Text.assemble(("best ", "bold"), r.best)
                if r.action:
                    detail.append_text(Text.assemble("   ", ("last ", "bold"), (r.action, "dim")))
                parts.append(Padding(detail, (0, 0, 0, 2)))
        done = sum(r.status not in ("waiting", "running") for r in self.rows.values())
        total = "" if "tokens" in columns else f", {sum(r.tokens for r in self.rows.values()):,} tokens"
        parts.append(Text(f"{done}/{len(self.rows)} finished{total}"))
        yield Group(*parts)


def _time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"
