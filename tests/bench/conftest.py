"""Each bench test gets its own cuda-agent home (peaks and roofline caches)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Caches (peaks, roofline counts, baselines) go to a fresh folder, never the user's."""
    monkeypatch.setenv("CUDA_AGENT_HOME", str(tmp_path / "home"))
