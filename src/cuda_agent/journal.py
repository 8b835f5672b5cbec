"""The one journal: an append-only JSONL file that survives a crash or a kill.

Every long job keeps its state in one (bench's results.jsonl, synth's candidates.jsonl, the
agent's trajectory.jsonl, the evaluation service's requests and verdicts): one line per finished
item, flushed and fsynced as it is written, so a killed job resumes from the file and redoes
nothing that has a line. A line cut short by a kill is dropped when the file is opened again.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from cuda_agent.usage import UsageError


def read_rows(path: str | Path, strict: bool = False) -> list[dict[str, Any]]:
    """Every complete JSON object line of `path` (none if it does not exist). A last line cut short
    by a kill is left out; a damaged complete line is skipped, or with `strict` raises UsageError
    naming file:line (a file that is not a journal at all)."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.endswith("\n"):
                break  # cut short by a kill mid-write
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                if strict:
                    raise UsageError(f"{path}:{number}: not a JSON line; is this the right file?") from None
                continue
            if isinstance(row, dict):
                rows.append(row)
            elif strict:
                raise ValueError(f"{path}:{number}: a JSON line that is not an object; is this the right file?")
    return rows


def latest_by(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """The last row for each value of `key` (an item done again replaces its earlier line)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get(key) is not None:
            out[str(row[key])] = row
    return out


class Journal:
    """Appends rows to a JSONL file durably (thread-safe); opening it drops a partial last line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        drop_partial_tail(self.path)
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, default=str) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def drop_partial_tail(path: Path) -> None:
    """Cut a last line that a kill left without its newline (the item it records is redone)."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
