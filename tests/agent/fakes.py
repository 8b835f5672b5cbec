"""Test doubles: an evaluator standing in for the harness, and the chat server of llm/fakes.py."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.harness import BuildResult, EvalResult, TimingStats, snapshot
from llm.fakes import ChatServer, error, reply, slow  # noqa: F401  (re-exported for the agent's tests)


def _timing(ms: float) -> TimingStats:
    return TimingStats(ms, ms, ms, ms, 0.0, 0.0, 30)


@dataclass
class FakeEvaluator:
    """A harness stand-in: model_new.py is correct when it calls `cuda_extension.fast`; profiled, it is
    `speedup` times faster than torch.compile. `delay` slows every action (to be killed mid-way)."""

    workspace: Path
    speedup: float = 1.5
    delay: float = 0.0
    calls: list[str] = field(default_factory=list)

    def compile(self) -> BuildResult:
        self.calls.append("compile")
        time.sleep(self.delay)
        return BuildResult(ok=True, seconds=0.5, compiled=2)

    def evaluate(self, profile: bool, keep: Path) -> EvalResult:
        self.calls.append("profile" if profile else "verify")
        time.sleep(self.delay)
        if (self.workspace / "model_new.py").is_file():  # the files judged, as the harness leaves them
            snapshot(self.workspace, keep)
        correct = "cuda_extension.fast" in (self.workspace / "model_new.py").read_text()
        if not correct:
            return EvalResult(task="t", reward=-1.0, correct=False, stage="correctness",
                              reason="output mismatch on input set 1: max abs error 3.2")
        if not profile:
            return EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="correct",
                              milestone="correct", max_abs_error=1e-6)
        return EvalResult(task="t", reward=3.0, correct=True, stage="done", reason="correct",
                          milestone="faster_than_compile", speedup_vs_eager=2 * self.speedup,
                          speedup_vs_compile=self.speedup, eager=_timing(2.0 * self.speedup),
                          compile=_timing(self.speedup), solution=_timing(1.0), max_abs_error=1e-6)


FAST_MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))
        self.bias = nn.Parameter(torch.empty(features))

    def forward(self, x):
        return cuda_extension.fast(x, self.scale, self.bias)
"""


def child_run(out: str, url: str | None = None, policy: str | None = None, delay: float = 0.0) -> None:
    """A run in a child process (to be killed): the fake harness, a model at `url` or a replay."""
    from cuda_agent.agent.config import load_config, override
    from cuda_agent.agent.run import optimize
    from cuda_agent.tasks import EXAMPLES_DIR

    config = override(load_config(), model={"timeout_s": 120.0, "max_retries": 0}, run={"isolation": False})
    optimize(EXAMPLES_DIR / "scale_bias_relu.py", model="m" if url else None, base_url=url, policy=policy,
             device="cpu", out=out, config=config, evaluator=lambda ws, device, timing: FakeEvaluator(ws, delay=delay))
