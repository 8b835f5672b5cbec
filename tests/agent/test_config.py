"""The agent's TOML config (agent/config.py): a value of the wrong type is said before a run starts,
as FILE: section.key, never as a crash mid-run (issue 26: `max_turns = "ten"`)."""

from __future__ import annotations

import pytest

from cuda_agent.agent.config import DEFAULT_CONFIG, load_config
from cuda_agent.config_check import ConfigError


def test_the_bundled_config_loads_with_its_types():
    c = load_config()
    assert c.limits.max_turns == 150 and isinstance(c.limits.max_seconds, float) and c.run.isolation is True


@pytest.mark.parametrize("toml, said", [
    ('[limits]\nmax_turns = "ten"\n', "limits.max_turns: expected an integer, got 'ten'"),
    ("[limits]\ncompact_at = [0.8]\n", "limits.compact_at: expected a number, got [0.8]"),
    ('[run]\nisolation = "yes please"\n', "run.isolation: expected true or false, got 'yes please'"),
    ("[model]\nprotocol = 2\n", "model.protocol: expected a string, got 2"),
    ("[prompts]\nsystem = 1\n", "prompts.system: expected a string, got 1"),
    ("[limits]\nmax_turn = 10\n", "limits.max_turn: unknown key(s); limits takes max_turns"),
    ("[limit]\nmax_turns = 10\n", "unknown section [limit]; known: limits, model, run, prompts"),
    ("max_turns = 10\n", "max_turns is outside any section: write it under [limits]"),
    ("[limits\n", "not valid TOML"),
])
def test_a_wrong_value_in_the_users_file_is_named_by_file_and_key(tmp_path, toml, said):
    path = tmp_path / "config.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: ") and said in str(e.value), str(e.value)


def test_a_right_value_in_the_users_file_is_laid_over_the_bundled_ones(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[limits]\nmax_turns = 12\nmax_seconds = 60\n")
    c = load_config(path)
    assert (c.limits.max_turns, c.limits.max_seconds) == (12, 60.0)
    assert c.limits.max_context_tokens == load_config(DEFAULT_CONFIG).limits.max_context_tokens
