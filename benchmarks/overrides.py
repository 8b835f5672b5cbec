"""`FIELD=VALUE` command-line overrides of a dataclass's scalar fields (EvalConfig, TimingPlan) for the benchmarks:
each value parsed as its field's default's type, an unknown field refused with the list of those that exist."""

from __future__ import annotations

from dataclasses import MISSING, fields


def overrides(cls: type, flag: str, items: list[str]) -> dict:
    """`items` (`FIELD=VALUE`, given with `flag`) as keyword arguments for `cls` (scalar fields only)."""
    kinds = {f.name: type(f.default) for f in fields(cls)
             if f.default is not MISSING and isinstance(f.default, (bool, int, float, str))}
    values = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in kinds:
            raise SystemExit(f"{flag} {item}: no such field {name!r} (fields: {', '.join(kinds)})")
        values[name] = value.lower() in ("1", "true", "yes") if kinds[name] is bool else kinds[name](value)
    return values


def eval_config(device: str, items: list[str], **given):
    """An EvalConfig for `device` with `given` fields and `--config` `items` over them."""
    from cuda_agent.harness import EvalConfig

    return EvalConfig(device=device, **{**given, **overrides(EvalConfig, "--config", items)})
