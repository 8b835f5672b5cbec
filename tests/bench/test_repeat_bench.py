"""benchmarks/repeat_bench.py: the comparison of two runs (ratios, the 5% rule, tasks timed in one
run only) and the one command itself, on the CPU with two tiny tasks."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "repeat_bench.py"


def _script():
    spec = importlib.util.spec_from_file_location("repeat_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["repeat_bench"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _run(rows: dict[str, tuple[float | None, float | None]], date: str = "d") -> dict:
    stats = (lambda ms: {"median_ms": ms, "iqr_ms": ms / 50} if ms else None)
    return {"meta": {"date": date, "quiet_host": True},
            "rows": [{"task": t, "eager": stats(e), "compile": stats(c)} for t, (e, c) in rows.items()]}


def test_the_comparison_counts_ratios_within_five_percent_either_way():
    rb = _script()
    first = _run({"a": (1.0, 2.0), "b": (4.0, 1.0), "broken": (None, None), "c": (10.0, 3.0)})
    second = _run({"b": (4.1, 1.04), "a": (0.96, 2.2), "c": (10.3, 2.85), "new": (1.0, 1.0)})
    by_task = {p.task: p for p in rb.pairs(first, second)}
    assert list(by_task) == ["a", "b", "broken", "c", "new"]      # the first run's order, then the rest
    assert rb.ratio(by_task["a"].eager) == pytest.approx(0.96)
    assert rb.within(by_task["a"].eager) is True                     # 1.0 / 0.96 = 1.042
    assert rb.within(by_task["a"].compile) is False                  # 2.2 / 2.0 = 1.10
    assert rb.within(by_task["c"].compile) is False                  # 3.0 / 2.85 = 1.053: a ratio of 0.95 is beyond
    assert rb.within(by_task["b"].compile) is True
    assert rb.within(by_task["broken"].eager) is None and rb.within(by_task["new"].eager) is None
    assert rb.counts(rb.pairs(first, second)) == {"eager": (3, 3), "compile": (1, 3), "both": (1, 3)}
    md = rb.compare_markdown(first, second)
    assert "| a | 1.000 | 0.960 | 0.960 | 2.000 | 2.200 | **1.100** |" in md
    assert "| broken | – | – | – | – | – | – |" in md
    assert "Within 5%: eager 3/3, compile 1/3, both 1/3." in md


TINY = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.{op}(x)

def get_inputs():
    return [torch.randn(16, 16)]

def get_init_inputs():
    return []
"""


@pytest.mark.long   # 22-50 s on 2 cores: `pytest -m long` (CI stays under 20 minutes)
def test_one_command_times_two_tiny_tasks_on_the_cpu_and_compares_runs(tmp_path):
    """The script end to end (its own service, two workers sharing the CPU device), then its
    comparison of that run with a copy whose medians are moved by known factors."""
    source = tmp_path / "tiny.jsonl"
    source.write_text("".join(json.dumps({"level": 1, "problem_id": i, "name": f"{i}_Tiny_{op}",
                                          "code": TINY.format(op=op)}) + "\n"
                              for i, op in enumerate(["relu", "tanh"], 1)))
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    first = tmp_path / "a.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--level", "1", "--tasks", "2",
                           "--workers", "2", "--budget", "0.01", "--min-runs", "3", "--max-runs", "5",
                           "--kernelbench", str(source), "--keep-inductor-cache", "--json", str(first)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = json.loads(first.read_text())
    assert run["meta"]["quiet_host"] and run["meta"]["workers"] == 2 and run["meta"]["plan"]["max_runs"] == 5
    assert sorted(r["task"] for r in run["rows"]) == ["1_Tiny_relu", "2_Tiny_tanh"]
    assert all(r["eager"]["median_ms"] > 0 and r["compile"]["median_ms"] > 0 for r in run["rows"])
    moved = json.loads(first.read_text())
    factors = {"1_Tiny_relu": (1.03, 1.2), "2_Tiny_tanh": (0.9, 1.0)}
    for r in moved["rows"]:
        r["eager"]["median_ms"] *= factors[r["task"]][0]
        r["compile"]["median_ms"] *= factors[r["task"]][1]
    second = tmp_path / "b.json"
    second.write_text(json.dumps(moved))
    table = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(first), str(second)],
                           capture_output=True, text=True, timeout=60).stdout
    assert "| 1_Tiny_relu |" in table and "| 1.030 |" in table and "**1.200**" in table and "**0.900**" in table
    assert "Within 5%: eager 1/2, compile 1/2, both 0/2." in table
