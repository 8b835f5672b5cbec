"""evaluate() itself, on the CPU backend: the files it judged are the ones it keeps, the timing plan
is the one it was given, the baseline cache is keyed by that plan and never moves a reward, the
baselines' compile holds the device's lock, and a verdict says where it was measured. (The paired
timing of the profile stage: test_profiling.py.)"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from cuda_agent.harness import EvalConfig, TimingPlan, evaluate
from cuda_agent.harness.baselines import cache_key
from cuda_agent.tasks import load_task

HACKS = Path(__file__).resolve().parent.parent / "hacks"
HONEST = HACKS / "cpu" / "honest_fused"
PLAN = TimingPlan(min_runs=3, max_runs=5, budget_s=0.02, warmup_s=0.0, min_warmup=1)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task():
    return load_task(HACKS / "tasks" / "sbr_small.py")


@pytest.fixture
def solution(tmp_path):
    dest = tmp_path / "solution"
    shutil.copytree(HONEST, dest, ignore=shutil.ignore_patterns("expect.json"))
    return dest


def test_the_judged_snapshot_is_what_is_kept(task, solution, tmp_path):
    keep = tmp_path / "kept"
    r = evaluate(task, solution, EvalConfig(device="cpu", profile=False), keep=keep)
    assert r.correct, r.reason
    kept = sorted(p.relative_to(keep).as_posix() for p in keep.rglob("*") if p.is_file())
    assert kept == ["kernels/sbr.cpp", "kernels/sbr.h", "kernels/sbr_binding.cpp", "model_new.py"]
    assert (keep / "model_new.py").read_text() == (solution / "model_new.py").read_text()


def test_a_solution_that_cannot_be_read_keeps_nothing_and_scores_the_failure_reward(task, tmp_path):
    keep = tmp_path / "kept"
    keep.mkdir()
    r = evaluate(task, tmp_path / "missing", EvalConfig(device="cpu"), keep=keep)
    assert (r.reward, r.stage, r.correct) == (-1.0, "static", False) and "no such file" in r.reason
    assert not any(keep.iterdir())


def _no_cached_baselines(task) -> None:
    from cuda_agent.harness import baselines

    baselines._path(cache_key(task.code, "cpu", PLAN)).unlink(missing_ok=True)


def test_the_timing_plan_given_is_the_one_followed_and_keys_the_baseline_cache(task, solution, monkeypatch):
    """The first evaluation stores its paired baselines; the next records them beside its own (the
    drift check) and takes its speed-ups from its own paired figures, never from the cache."""
    from cuda_agent.harness import baselines

    monkeypatch.setattr(baselines, "CACHE_AGREEMENT", float("inf"))  # kept whatever the load (see below)
    _no_cached_baselines(task)
    config = EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=True)
    first = evaluate(task, solution, config)
    assert first.correct and first.milestone != "failed", first.reason
    assert first.paired is not None and first.paired.cached_ms == {}
    for stats in (first.eager, first.compile, first.solution):
        assert stats.runs <= PLAN.max_runs and stats.windows == first.paired.rounds
    second = evaluate(task, solution, config)
    assert "baseline_cached" not in first.flags and "baseline_cached" in second.flags
    assert second.paired.cached_ms == {"eager": first.eager.median_ms, "compile": first.compile.median_ms}
    assert second.speedup_vs_eager == second.paired.ratios["eager"].value
    assert second.speedup_vs_compile == second.paired.ratios["compile"].value
    other = TimingPlan(min_runs=3, max_runs=6, budget_s=0.02, warmup_s=0.0, min_warmup=1)
    assert cache_key(task.code, "cpu", other) != cache_key(task.code, "cpu", PLAN)
    assert cache_key(task.code, "cpu", TimingPlan(**PLAN.to_dict())) == cache_key(task.code, "cpu", PLAN)


def test_a_poisoned_cached_baseline_moves_no_reward_and_is_replaced(task, solution):
    """A cached eager figure 100 times the truth (poisoned when it was taken: a solution's threads
    slowing the reference worker) is recorded beside the paired one, the speed-ups are the paired
    run's own, and the cache then holds the paired figures."""
    import json
    from dataclasses import asdict

    from cuda_agent.harness import baselines

    _no_cached_baselines(task)
    config = EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=True)
    first = evaluate(task, solution, config)
    assert first.correct, first.reason
    path = baselines._path(cache_key(task.code, "cpu", PLAN))
    poisoned = json.loads(path.read_text())
    for k in ("median_ms", "mean_ms", "min_ms", "max_ms"):
        poisoned["eager"][k] *= 100
    path.write_text(json.dumps(poisoned))
    second = evaluate(task, solution, config)
    assert "baseline_cache_disagreed" in second.flags and "baseline_cached" not in second.flags, second.flags
    assert second.paired.cached_ms["eager"] == poisoned["eager"]["median_ms"]
    assert second.speedup_vs_eager == second.paired.ratios["eager"].value < 50
    assert second.eager.median_ms < poisoned["eager"]["median_ms"] / 10
    assert json.loads(path.read_text())["eager"] == asdict(second.eager)


def test_the_reference_compiles_while_no_timer_can_take_the_device(task, solution, monkeypatch):
    """torch.compile of the baselines is CPU work: the reference worker holds the device's lock
    shared while it compiles (itself, so that Inductor's autotuning can hold it alone), and the
    evaluation holds it alone while the reference times."""
    import threading

    from cuda_agent.harness.session import Session as _Session

    from measure.lockprobe import timer_would_wait

    seen: dict[str, bool] = {}
    ask = _Session.ask_reference

    def spy(self, message, *args, **kwargs):
        if message.get("op") != "compile":
            seen.setdefault(message.get("op"), timer_would_wait())
            return ask(self, message, *args, **kwargs)
        done, held = threading.Event(), []

        def poll():  # the hold is the reference worker's, taken when the message arrives
            while not done.is_set() and not held:
                held.extend([True] if timer_would_wait() else [])
                time.sleep(0.005)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            return ask(self, message, *args, **kwargs)
        finally:
            done.set()
            poller.join()
            seen["compile"] = bool(held)

    monkeypatch.setattr(_Session, "ask_reference", spy)
    r = evaluate(task, solution, EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False))
    assert r.correct and r.milestone != "failed", r.reason
    assert seen["compile"] and seen["time_start"]  # the first baseline run starts with the device held alone
    assert not timer_would_wait()


def test_a_plan_that_cannot_be_followed_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="min_runs"):
        TimingPlan(min_runs=10, max_runs=5)
    with pytest.raises(ValueError, match="flush"):
        TimingPlan(flush="zero")


def test_the_initialisation_convention_survives_a_journal_line():
    from cuda_agent.harness.result import EvalResult

    result = EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="", policy="relaxed", init="same_seed")
    assert EvalResult.from_dict(result.to_dict()).init == "same_seed"
    old_line = {k: v for k, v in result.to_dict().items() if k != "init"}  # written before the field existed
    assert EvalResult.from_dict(old_line).init is None


def test_a_verdict_says_where_it_was_measured_and_keeps_it_through_a_journal_line(task, solution, tmp_path):
    import torch

    from cuda_agent.harness.baselines import TIMING_METHOD
    from cuda_agent.harness.result import EvalResult

    r = evaluate(task, solution, EvalConfig(device="cpu", profile=False))
    assert r.correct, r.reason
    m = r.measured
    assert m is not None and m.device.startswith("cpu-") and (m.driver, m.cuda) == (None, None)
    assert (m.torch, m.timing_method) == (torch.__version__, TIMING_METHOD)
    assert EvalResult.from_dict(r.to_dict()).measured == m
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model_new.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n    x = torch.relu\n")
    static = evaluate(task, tmp_path / "broken", EvalConfig(device="cpu", profile=False))
    assert static.stage == "static" and static.measured is None  # it never ran
