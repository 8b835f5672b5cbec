"""Baselines (harness/baselines.py, the judge's cache; measure/baselines.py, their timing): the
reference model is built and torch.compile'd holding the device's lock shared (no timer runs
beside that CPU work), then timed holding it alone."""

from __future__ import annotations

from cuda_agent.harness import baselines
from cuda_agent.harness.config import EvalConfig
from cuda_agent.measure import TimingPlan, time_baselines
from cuda_agent.measure import baselines as timing

from measure.lockprobe import timer_would_wait

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
PLAN = TimingPlan(min_runs=3, max_runs=5, budget_s=0.02, warmup_s=0.0, min_warmup=1)


def _spies(monkeypatch) -> dict[str, list[bool]]:
    """Whether a timer could have taken the device during each compile, and whether anyone else
    could have during each timing (eager stands in for the compiled model: the test is the lock)."""
    seen: dict[str, list] = {"compile": [], "timing": []}
    time_callable = timing.time_callable

    def compile_for_timing(model, inputs, alone=None, lock_dir=None):
        seen["compile"].append(timer_would_wait())
        seen.setdefault("autotune_alone", []).append(alone)
        return model

    def timed(*args, **kwargs):
        seen["timing"].append(timer_would_wait())
        return time_callable(*args, **kwargs)

    monkeypatch.setattr(baselines, "compile_for_timing", compile_for_timing)
    monkeypatch.setattr(timing, "compile_for_timing", compile_for_timing)
    monkeypatch.setattr(timing, "time_callable", timed)
    return seen


def test_a_task_is_compiled_while_no_timer_can_take_the_device_and_timed_alone(monkeypatch):
    seen = _spies(monkeypatch)
    eager, compiled = baselines.task_baselines(RELU, "relu_lock", EvalConfig(device="cpu", timing=PLAN,
                                                                             use_baseline_cache=False))
    assert eager.runs >= 3 and compiled.runs >= 3
    assert seen == {"compile": [True], "timing": [True, True], "autotune_alone": ["cpu0"]}
    assert not timer_would_wait()  # both released


def test_time_baselines_compiles_holding_the_lock_shared_unless_the_caller_holds_it(monkeypatch):
    import torch

    seen = _spies(monkeypatch)
    model, cpu = torch.nn.ReLU(), torch.device("cpu")
    time_baselines(model, lambda i: [torch.randn(8, 8)], cpu, PLAN)
    assert seen == {"compile": [True], "timing": [True, True], "autotune_alone": ["cpu0"]}
    for v in seen.values():
        v.clear()
    time_baselines(model, lambda i: [torch.randn(8, 8)], cpu, PLAN, lock=False)  # the reference worker's
    assert seen == {"compile": [False], "timing": [False, False], "autotune_alone": [None]}


def test_a_loud_host_compiles_beside_timing_and_caches_nothing(monkeypatch):
    """quiet_host=False (to compare with the old way): no shared hold, and its figures stay out of
    the cache that evaluations read."""
    seen = _spies(monkeypatch)
    config = EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False, quiet_host=False)
    key = baselines.cache_key(RELU + "# loud\n", "cpu", PLAN)
    baselines.task_baselines(RELU + "# loud\n", "relu_loud", config)
    assert seen == {"compile": [False], "timing": [True, True], "autotune_alone": [None]}
    assert baselines.load(key) is None
