"""Results rows shaped like results.jsonl lines, and tiny tasks, for the bench tests."""

from __future__ import annotations

import random

from cuda_agent.tasks import Task


def timing(ms: float, spread: float = 0.02) -> dict:
    return {"median_ms": ms, "mean_ms": ms * 1.01, "min_ms": ms * 0.98, "max_ms": ms * 1.1,
            "std_ms": ms * spread, "iqr_ms": ms * spread, "runs": 100}


def row(name: str, level: int, pid: int, correct: bool, vs_eager: float | None = None,
        vs_compile: float | None = None, eager_ms: float = 1.0, compile_ms: float = 0.8,
        sol_ms: float | None = 0.1, reason: str = "") -> dict:
    """One results line; the solution time follows from eager time / speed-up."""
    milestone, reward = "failed", -1.0
    if correct:
        milestone, reward = "correct", 1.0
        if vs_eager is not None and vs_eager >= 1.05:
            milestone, reward = "faster_than_eager", 2.0
            if vs_compile is not None and vs_compile >= 1.05:
                milestone, reward = "faster_than_compile", 3.0
    r = {"task": name, "level": level, "problem_id": pid, "reward": reward, "correct": correct,
         "stage": "done" if correct else "correctness", "milestone": milestone,
         "reason": reason or ("verified" if correct else "output mismatch: max abs error 0.5"),
         "speedup_vs_eager": vs_eager if correct else None, "speedup_vs_compile": vs_compile if correct else None,
         "eager": timing(eager_ms), "compile": timing(compile_ms), "flags": []}
    r["solution"] = timing(eager_ms / vs_eager) if correct and vs_eager else None
    r["roofline"] = {"sol_ms": sol_ms, "bound": "memory"} if sol_ms else {}
    return r


def synthetic_rows(per_level: int = 30, seed: int = 0) -> list[dict]:
    """A plausible benchmark: levels 1-3, most tasks correct, speed-ups spread around 1-3x."""
    rnd = random.Random(seed)
    rows = []
    for level in (1, 2, 3):
        for pid in range(1, per_level + 1):
            correct = rnd.random() < 0.85
            eager = rnd.uniform(0.05, 20)
            compile_ms = eager * rnd.uniform(0.5, 1.2)
            s = rnd.lognormvariate(0.4, 0.5)
            rows.append(row(f"{pid}_Synthetic_task_L{level}", level, pid, correct, s, s * compile_ms / eager,
                            eager, compile_ms, eager * rnd.uniform(0.05, 0.9)))
    return rows


RELU = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64, 32)]

def get_init_inputs():
    return []
"""


def relu_tasks(n: int, level: int = 1) -> list[Task]:
    """`n` small distinct tasks (the same program under different names and ids)."""
    return [Task(name=f"{i}_Relu_{i}", code=RELU + f"# variant {i}\n", origin=f"synthetic/{i}.py", level=level,
                 problem_id=i) for i in range(1, n + 1)]
