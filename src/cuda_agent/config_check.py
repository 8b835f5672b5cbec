"""Config files' values into typed dataclasses, checked with pydantic (the stack carries it: typer
needs it), so that `max_turns = "ten"` is said before a run starts, as `FILE: limits.max_turns:
expected an integer, got 'ten'`, instead of failing mid-run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

from cuda_agent.usage import UsageError

T = TypeVar("T")

_EXPECTED = {"int": "an integer", "float": "a number", "bool": "true or false", "string": "a string",
             "list": "a list", "tuple": "a list", "dict": "a table of keys and values", "none": "nothing (null)"}


class ConfigError(UsageError):
    """A config file's value that is missing, unknown or of the wrong type; the message says FILE: KEY."""


def typed(cls: type[T], values: Any, file: str | Path, section: str = "") -> T:
    """`cls` (a dataclass) made from `values` (a mapping read from `file`), every field checked for its
    type; ConfigError names the file and the key (`section.key`) of the first few wrong values."""
    import pydantic

    prefix = f"{section}." if section else ""
    if not isinstance(values, dict):
        raise ConfigError(f"{file}: {section or 'the file'}: expected {_EXPECTED['dict']}, got {_shown(values)}")
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"{file}: {', '.join(prefix + str(k) for k in unknown)}: unknown key(s); "
                          f"{section or 'the file'} takes {', '.join(known)}")
    try:
        return pydantic.TypeAdapter(cls).validate_python(values)
    except pydantic.ValidationError as e:
        raise ConfigError(f"{file}: " + "; ".join(_problems(e.errors(), prefix)[:3])) from None


def _problems(errors: list[dict[str, Any]], prefix: str) -> list[str]:
    """One message per key: a value that fits no member of a union (`str | list[str]`) gets one error
    per member from pydantic, the member named in its location; they are said as one."""
    expected: dict[str, list[str]] = {}
    got: dict[str, Any] = {}
    for err in errors:
        key = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]
                               if not _union_member(p)).lstrip(".")
        kind = str(err["type"])
        what = "missing" if kind == "missing" else next(
            (v for k, v in _EXPECTED.items() if kind.startswith(k)), err["msg"][0].lower() + err["msg"][1:])
        expected.setdefault(key, []).append(what)
        got[key] = err.get("input")
    # a value of the right kind with a wrong item (`[a, 2]` for `str | list[str]`): the item is the news
    deepest = [k for k in expected if not any(o.startswith((k + "[", k + ".")) for o in expected)]
    return [f"{key}: missing; it is required" if expected[key] == ["missing"] else
            f"{key}: expected {' or '.join(dict.fromkeys(expected[key]))}, got {_shown(got[key])}"
            for key in deepest]


def _union_member(part: Any) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none") or "[" in part)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
