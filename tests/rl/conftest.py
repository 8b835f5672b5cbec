"""Fixtures of the RL tests: the tiny model, built once per session (needs transformers and tokenizers)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("transformers", reason="the tiny model needs transformers (install cuda-agent[rl])")
    from cuda_agent.rl.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
