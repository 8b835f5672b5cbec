"""Config files' values checked for their types (cuda_agent/config_check.py): FILE: KEY: what was
expected, and what was found."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from cuda_agent.config_check import ConfigError, typed
from cuda_agent.usage import UsageError


@dataclass
class Settings:
    count: int
    ratio: float = 0.5
    on: bool = True
    name: str = "a"
    limit: int | None = None
    tasks: str | list[str] = "t"
    ops: list[str] = field(default_factory=list)


@pytest.mark.parametrize("values, said", [
    ({"count": "ten"}, "run.yaml: sec.count: expected an integer, got 'ten'"),
    ({"count": 1.5}, "run.yaml: sec.count: expected an integer, got 1.5"),
    ({"count": 1, "ratio": "half"}, "run.yaml: sec.ratio: expected a number, got 'half'"),
    ({"count": 1, "on": "maybe"}, "run.yaml: sec.on: expected true or false, got 'maybe'"),
    ({"count": 1, "name": 3}, "run.yaml: sec.name: expected a string, got 3"),
    ({"count": 1, "limit": "x"}, "run.yaml: sec.limit: expected an integer, got 'x'"),
    ({"count": 1, "tasks": 3}, "run.yaml: sec.tasks: expected a string or a list, got 3"),
    ({"count": 1, "ops": ["a", 2]}, "run.yaml: sec.ops[1]: expected a string, got 2"),
    ({}, "run.yaml: sec.count: missing; it is required"),
    ({"count": 1, "cuont": 2},
     "run.yaml: sec.cuont: unknown key(s); sec takes count, ratio, on, name, limit, tasks, ops"),
    ("text", "run.yaml: sec: expected a table of keys and values, got 'text'"),
])
def test_a_wrong_value_is_named_by_file_and_key(values, said):
    with pytest.raises(ConfigError) as e:
        typed(Settings, values, "run.yaml", "sec")
    assert str(e.value) == said and isinstance(e.value, UsageError)


def test_right_values_are_taken_as_typed():
    s = typed(Settings, {"count": 3, "ratio": 1, "tasks": ["x"], "limit": None}, "f.toml")
    assert s == Settings(count=3, ratio=1.0, tasks=["x"]) and isinstance(s.ratio, float)
