"""Trajectories: one JSON object a line, written as the run goes, so a killed run loses nothing.

Records (`type`):
- `run`: the header (task, device, model, limits, workspace).
- `message`: one OpenAI chat message (`message`, with tool calls and tool results as the API has
  them), its `turn`, `elapsed` seconds since the run began, and where they apply the model's `usage`
  and `seconds`, or the tool's `seconds`, harness result (`harness`) and `reward`.
- `final_evaluation`: the profile of the workspace as the model left it.
- `resume` and `end` (status, turns, tokens, best result).
`read_messages` gives the chat alone, ready for an API, a replay or fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_agent.journal import Journal, drop_partial_tail, read_rows
from cuda_agent.llm import Usage
from cuda_agent.usage import UsageError


class TrajectoryWriter:
    """Appends records to the run's journal, each on disk before the next turn."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._journal = Journal(self.path)

    def write(self, type: str, **fields: Any) -> None:
        self._journal.append({"type": type, **fields})

    def close(self) -> None:
        self._journal.close()


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every complete record; a last line cut short by a kill is left out."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such trajectory")
    return read_rows(path, strict=True)


def read_messages(path: str | Path) -> list[dict[str, Any]]:
    """The chat messages of a trajectory (a file of bare OpenAI messages, one a line, works too)."""
    out = []
    for r in read_records(path):
        if r.get("type") == "message":
            out.append(r["message"])
        elif "role" in r and "type" not in r:
            out.append(r)
    return out


@dataclass
class Resumed:
    """What a run had done when it stopped."""

    header: dict[str, Any]
    messages: list[dict[str, Any]]
    turns: int
    usage: Usage
    elapsed: float
    records: list[dict[str, Any]] = field(default_factory=list)


def load_for_resume(path: str | Path) -> Resumed:
    """The state of the run recorded in `path`; a last line cut short by a kill is removed from the file."""
    path = Path(path)
    drop_partial_tail(path)
    records = read_records(path)
    header = next((r for r in records if r.get("type") == "run"), None)
    if header is None:
        raise UsageError(f"{path}: no run header; it is not a trajectory this version can resume")
    messages = [r for r in records if r.get("type") == "message"]
    usage = Usage()
    for r in messages:
        usage = usage + Usage(**r.get("usage", {}))
    elapsed = max((r.get("elapsed", 0.0) for r in records), default=0.0)
    turns = sum(1 for r in messages if r["message"]["role"] == "assistant")
    return Resumed(header, [r["message"] for r in messages], turns, usage, elapsed, records)
