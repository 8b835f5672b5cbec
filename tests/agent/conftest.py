from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuda_agent.agent.config import AgentConfig, load_config, override
from cuda_agent.agent.solution import SolutionKeeper
from cuda_agent.agent.tools import Tools
from cuda_agent.sandbox import CommandRunner
from cuda_agent.tasks import EXAMPLES_DIR, load_task
from cuda_agent.workspace import create_workspace, read_manifest

from .fakes import FakeEvaluator


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "harness: runs the real harness (cuda_agent.harness.evaluation)")


@pytest.fixture
def task():
    return load_task(EXAMPLES_DIR / "scale_bias_relu.py")


@pytest.fixture
def fast_config() -> AgentConfig:
    """The bundled config with quick retries and timeouts, and no user switching (tests of that are apart)."""
    return override(load_config(), model={"backoff_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 2.0,
                                          "max_retries": 3},
                    run={"isolation": False}, limits={"bash_timeout_s": 10})


@pytest.fixture
def workspace(task, tmp_path: Path) -> Path:
    return create_workspace(task, tmp_path / "ws", "cpu").path


@pytest.fixture
def tools(workspace: Path, tmp_path: Path, fast_config: AgentConfig) -> Tools:
    protected = set(read_manifest(workspace)[0].protected)
    return Tools(workspace, FakeEvaluator(workspace), SolutionKeeper(workspace, tmp_path / "out"),
                 CommandRunner(workspace, None), fast_config.limits, fast_config.prompts, protected)


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
