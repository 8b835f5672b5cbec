"""Where cuda-agent keeps what outlives one command: build cache, baselines, the signing key."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """`$CUDA_AGENT_HOME`, or `~/.cache/cuda_agent`; created with owner-only permissions."""
    root = Path(os.environ.get("CUDA_AGENT_HOME") or Path.home() / ".cache" / "cuda_agent")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def subdir(name: str) -> Path:
    p = home() / name
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    return p
