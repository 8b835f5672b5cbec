"""Fixtures of the RL tests: the tiny model, built once per session (needs transformers and tokenizers), and
an agent config overlay for the agent loop's runs."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("transformers", reason="the tiny model needs transformers (install cuda-agent[rl])")
    from cuda_agent.rl.tools.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def agent_toml(tmp_path_factory) -> Path:
    """An agent config overlay for the loop's tests: commands run as this user (no tool user to claim)."""
    path = tmp_path_factory.mktemp("agent") / "agent.toml"
    path.write_text("[run]\nisolation = false\n\n[limits]\nbash_timeout_s = 60\n")
    return path
