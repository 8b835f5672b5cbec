"""The Task type: one PyTorch reference program in KernelBench form."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

from cuda_agent.usage import UsageError


class TaskError(UsageError):
    """A task source that cannot be used; the message names the file (or row) and the problem."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


@dataclass(frozen=True)
class Task:
    """A reference program: `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`.

    `code` is the whole source; it is parsed when loaded and only ever run by the harness.
    """

    name: str
    code: str
    origin: str
    level: int | None = None
    problem_id: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()

    @property
    def key(self) -> str:
        """A short identifier that changes whenever the code does (cache keys, file names)."""
        return f"{self.name}-{self.sha256[:12]}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """The task without its code: what `tasks list --json` prints."""
        d = self.to_dict()
        d.pop("code")
        d["lines"] = self.code.count("\n") + 1
        d["sha256"] = self.sha256
        return d
