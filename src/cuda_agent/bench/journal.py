"""An append-only JSONL file that survives a crash or a kill: one line per finished item, flushed
and fsynced as it is written; a line cut short by a kill is dropped when the file is opened again."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every complete JSON object line of `path` (none if it does not exist); a truncated or
    damaged line is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # cut short by a kill mid-write
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def latest_by(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """The last row for each value of `key` (a task evaluated again replaces its earlier line)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get(key) is not None:
            out[str(row[key])] = row
    return out


class Journal:
    """Appends rows to a JSONL file durably; opening it drops a partial last line first."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_partial_tail(self.path)
        self._file = self.path.open("a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_partial_tail(path: Path) -> None:
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
