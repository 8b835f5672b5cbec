"""The dataset the synth benchmark produced on the H100 (benchmarks/synth_h100) loads as tasks and
carries what a training run needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.tasks import load_tasks

DATASET = Path(__file__).resolve().parents[2] / "benchmarks" / "synth_h100" / "ops.parquet"


def test_the_h100_dataset_loads_with_its_columns():
    pq = pytest.importorskip("pyarrow.parquet")
    rows = pq.read_table(DATASET).to_pylist()
    assert len(rows) >= 300
    for column in ("name", "code", "ops", "composer", "eager_ms", "compile_ms", "nearest_kernelbench",
                   "kernelbench_similarity", "filter_versions"):
        assert column in rows[0], column
    assert all(1.0 <= r["eager_ms"] <= 100.0 for r in rows)
    assert len({r["name"] for r in rows}) == len(rows)
    assert len(load_tasks(DATASET).tasks) == len(rows)


SET_1K = Path(__file__).resolve().parents[2] / "benchmarks" / "synth_h100_1k" / "ops.parquet"
KERNELBENCH = Path(__file__).resolve().parents[3] / "shared" / "kernelbench" / "kernelbench.jsonl"
CORE = {"attention", "conv", "gemm"}


@pytest.mark.slow  # the KernelBench guard's shingle index over 1,000 tasks
def test_the_1000_task_set_meets_the_mix_the_window_and_loads_for_rl():
    """The 1,000-task set made on the GPU (issue 28): the test's mix (>= 60% with a GEMM, convolution or
    attention core), every task in the 1-100 ms window and runnable under torch.compile, none a near-copy of
    KernelBench, and loadable by the task loader and the RL data loader, whose split drops nothing."""
    pq = pytest.importorskip("pyarrow.parquet")
    from cuda_agent.rl.data.rows import KernelBenchGuard, load_training_tasks, split_tasks

    rows = pq.read_table(SET_1K).to_pylist()
    assert len(rows) == 1000 and len({r["name"] for r in rows}) == 1000
    assert sum(r["task_class"] in CORE for r in rows) >= 600
    assert all(1.0 <= r["eager_ms"] <= 100.0 and r["compile_ms"] > 0 for r in rows)
    assert max(r["kernelbench_similarity"] for r in rows) < 0.7
    tasks = load_training_tasks([SET_1K])
    assert len(tasks) == 1000
    if KERNELBENCH.exists():
        split = split_tasks(tasks, KernelBenchGuard.load(KERNELBENCH))
        assert not split.excluded and len(split.train) + len(split.val) == 1000


SET_6K = Path(__file__).resolve().parents[2] / "benchmarks" / "synth_h100_6k" / "ops.parquet"


@pytest.mark.slow  # the KernelBench guard's shingle index over thousands of tasks
def test_the_6000_task_run_so_far_meets_the_mix_the_window_and_loads_for_rl():
    """The 6,000-task run (issue 28), committed after every device call: what it holds so far (2,536 tasks on
    2026-11-29) is a set in its own right, as the 1,000-task one."""
    pq = pytest.importorskip("pyarrow.parquet")
    from cuda_agent.rl.data.rows import KernelBenchGuard, load_training_tasks, split_tasks

    rows = pq.read_table(SET_6K).to_pylist()
    assert 2536 <= len(rows) <= 6000 and len({r["name"] for r in rows}) == len(rows)
    assert sum(r["task_class"] in CORE for r in rows) >= 0.6 * len(rows)
    assert all(1.0 <= r["eager_ms"] <= 100.0 and r["compile_ms"] > 0 for r in rows)
    assert max(r["kernelbench_similarity"] for r in rows) < 0.7
    tasks = load_training_tasks([SET_6K])
    assert len(tasks) == len(rows)
    if KERNELBENCH.exists():  # the RL loader's own near-copy guard, on every fifth task (CI's time)
        sample = tasks[::5]
        split = split_tasks(sample, KernelBenchGuard.load(KERNELBENCH))
        assert not split.excluded and len(split.train) + len(split.val) == len(sample)
