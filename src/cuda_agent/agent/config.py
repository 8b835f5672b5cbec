"""The agent's limits and prompts: data in config.toml, read into typed dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        raise ImportError("reading the agent's config on Python 3.10 needs tomli: pip install tomli") from None

from cuda_agent.config_check import ConfigError, typed
from cuda_agent.llm import ModelSettings

DEFAULT_CONFIG = Path(__file__).resolve().parent / "config.toml"


@dataclass(frozen=True)
class Limits:
    max_turns: int
    max_context_tokens: int
    compact_at: float
    keep_recent_outputs: int
    shortened_output_chars: int
    max_seconds: float
    bash_timeout_s: float
    max_output_chars: int
    max_read_lines: int
    max_search_matches: int
    turns_left_warning: int


@dataclass(frozen=True)
class RunSettings:
    isolation: bool
    final_profile: bool


@dataclass(frozen=True)
class Prompts:
    system: str
    task: str
    text_protocol: str
    interrupted: str
    shortened: str
    truncated: str
    turns_left: str


@dataclass(frozen=True)
class AgentConfig:
    limits: Limits
    model: ModelSettings
    run: RunSettings
    prompts: Prompts


_SECTIONS = {"limits": Limits, "model": ModelSettings, "run": RunSettings, "prompts": Prompts}


def load_config(path: str | Path | None = None) -> AgentConfig:
    """The bundled config.toml, with the sections of the TOML file at `path` (if given) laid over it;
    every value checked for its type (ConfigError: `FILE: limits.max_turns: expected an integer, ...`)."""
    data = _read(DEFAULT_CONFIG)
    if path is not None:
        for section, values in _read(Path(path)).items():
            if not isinstance(values, dict):
                home = next((s for s, cls in _SECTIONS.items() if section in {f.name for f in fields(cls)}), None)
                where = f"[{home}]" if home else "its section (" + ", ".join(f"[{s}]" for s in _SECTIONS) + ")"
                raise ConfigError(f"{path}: {section} is outside any section: write it under {where}")
            if section not in _SECTIONS:
                raise ConfigError(f"{path}: unknown section [{section}]; known: {', '.join(_SECTIONS)}")
            data.setdefault(section, {}).update(values)
    where = path if path is not None else DEFAULT_CONFIG   # the bundled values are right (tested)
    return AgentConfig(**{name: typed(cls, data.get(name, {}), where, name) for name, cls in _SECTIONS.items()})


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None


def override(config: AgentConfig, **sections: dict[str, Any]) -> AgentConfig:
    """`config` with some values replaced, e.g. `override(c, limits={"max_turns": 20})`; None keeps a value."""
    changes = {}
    for section, values in sections.items():
        values = {k: v for k, v in values.items() if v is not None}
        if values:
            changes[section] = replace(getattr(config, section), **values)
    return replace(config, **changes)
