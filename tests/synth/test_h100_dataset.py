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
