"""Baseline tables: resumable across runs, published figures matched by level and name, and the
timer adapter measuring a real task on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda_agent.bench.baselines import (baselines, baselines_markdown, harness_time_baselines, published_times,
                                        write_baselines_table)
from cuda_agent.journal import read_rows
from cuda_agent.harness.config import EvalConfig
from cuda_agent.measure import TimingPlan, TimingStats

from .synthetic import relu_tasks

REPO = Path(__file__).resolve().parents[2]


class FakeTimer:
    """Fixed timings (task 3 runs out of memory); each call is written to `log` (the timer runs on
    the service's evaluators, in other processes)."""

    def __init__(self, log: Path | None = None):
        self.log = log

    def __call__(self, task, config):
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(task.name + "\n")
        if task.problem_id == 3:
            raise RuntimeError("CUDA out of memory")
        return TimingStats(2.0, 2.0, 1.9, 2.2, 0.1, 0.1, 50), TimingStats(1.0, 1.0, 0.9, 1.1, 0.05, 0.04, 50)


def _calls(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_resumes_and_retries_errors_only_when_asked(tmp_path, service):
    tasks, out, log = relu_tasks(4), tmp_path / "baselines.jsonl", tmp_path / "calls.log"
    one_at_a_time = dict(timer=FakeTimer(log), roofline=False, service=service)
    first = baselines(tasks[:2], "cpu", out, **one_at_a_time)
    assert (first.timed, sorted(_calls(log))) == (2, sorted([tasks[0].name, tasks[1].name]))
    second = baselines(tasks, "cpu", out, **one_at_a_time)
    assert (second.timed, second.failed) == (2, 1)
    assert sorted(_calls(log)[2:]) == sorted([tasks[2].name, tasks[3].name])
    baselines(tasks, "cpu", out, **one_at_a_time)
    assert len(_calls(log)) == 4                                   # nothing left to do
    baselines(tasks, "cpu", out, **one_at_a_time, retry_errors=True)
    assert _calls(log)[4:] == [tasks[2].name]
    rows = [r for r in read_rows(out) if r["task"] == tasks[2].name]  # in the order the evaluators finished
    assert "out of memory" in rows[0]["error"]


def test_max_seconds_stops_before_the_next_task(tmp_path, service):
    run = baselines(relu_tasks(3), "cpu", tmp_path / "b.jsonl", timer=FakeTimer(), roofline=False,
                    max_seconds=1e-9, service=service)
    assert run.stopped_early and run.timed == 0


def test_published_figures_match_by_level_and_name(tmp_path, service):
    path = tmp_path / "published.json"
    path.write_text(json.dumps({"level1": {"1_Relu_1.py": {"mean": 4.0, "std": 0.1}},
                                "level2": {"1_Relu_1.py": {"mean": 9.0}}}))
    published = published_times(path)
    assert published == {(1, "1_Relu_1"): 4.0, (2, "1_Relu_1"): 9.0}
    out = tmp_path / "b.jsonl"
    baselines(relu_tasks(2), "cpu", out, timer=FakeTimer(), published=published, roofline=False, service=service)
    md = write_baselines_table(out).read_text()
    line = next(l for l in md.splitlines() if "| 1_Relu_1 |" in l)
    assert "2.00 ±0.100" in line and "1.00 ±0.040" in line      # eager and compile median ± IQR
    assert "| 2.00x |" in line                                   # eager / compile
    assert "| 4.00 | 0.50x |" in line                            # published eager, ours / published


def test_table_has_sol_columns(tmp_path, service):
    out = tmp_path / "b.jsonl"
    baselines(relu_tasks(1), "cpu", out, timer=FakeTimer(), service=service)
    row = read_rows(out)[0]
    assert row["roofline"]["sol_ms"] > 0
    md = baselines_markdown(read_rows(out))
    assert f"{row['roofline']['sol_ms'] / 2.0:.1%}" in md      # SOL fraction of the 2 ms eager time


@pytest.mark.slow
def test_harness_timer_times_a_real_task_on_cpu():
    task = relu_tasks(1)[0]
    config = EvalConfig(device="cpu", timing=TimingPlan(min_runs=3, max_runs=5, budget_s=0.05))
    eager, compiled = harness_time_baselines(task, config)
    assert eager.runs >= 3 and compiled.runs >= 3
    assert eager.median_ms > 0 and compiled.median_ms > 0
    assert harness_time_baselines(task, config) == (eager, compiled)    # the harness's baseline cache


@pytest.mark.slow
def test_evaluators_time_real_tasks_in_parallel(tmp_path, service):
    """Two evaluators of the service (each compiles on its own, then takes the device lock to time):
    every task gets its row, a task whose timing fails gets an error row, and a second run adds none."""
    import shutil

    from cuda_agent.tasks import load_tasks

    folder = tmp_path / "tasks"
    shutil.copytree(REPO / "tests" / "hacks" / "tasks", folder)
    (folder / "broken.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        raise RuntimeError('this reference is broken')\n\n\n"
        "def get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n")
    tasks = load_tasks(folder).tasks
    out = tmp_path / "b.jsonl"
    config = EvalConfig(device="cpu", timing=TimingPlan(budget_s=0.05, min_runs=3, max_runs=10))
    run = baselines(tasks, "cpu", out, config=config, roofline=False, service=service)
    rows = {r["task"]: r for r in read_rows(out)}
    assert run.timed == len(tasks) == len(rows)
    assert rows["sbr_small"]["eager"]["median_ms"] > 0 and rows["sbr_small"]["compile"]["median_ms"] > 0
    assert rows["rowsum_varlen"]["eager"]["median_ms"] > 0   # inputs whose shape changes per seed time too
    assert "this reference is broken" in rows["broken"]["error"]
    assert baselines(tasks, "cpu", out, config=config, roofline=False, service=service).timed == 0


class OutOfMemoryOnce:
    """A timer whose task 2 runs out of device memory the first time (as beside other workers)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __call__(self, task, config):
        import torch

        mark = self.folder / task.name
        if task.problem_id == 2 and not mark.exists():
            mark.touch()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return TimingStats(2.0, 2.0, 1.9, 2.2, 0.1, 0.1, 50), TimingStats(1.0, 1.0, 0.9, 1.1, 0.05, 0.04, 50)


def test_a_task_out_of_memory_beside_other_workers_is_timed_again_alone(tmp_path, service):
    tasks, out = relu_tasks(4), tmp_path / "b.jsonl"
    run = baselines(tasks, "cpu", out, timer=OutOfMemoryOnce(tmp_path), roofline=False, service=service)
    rows = {r["task"]: r for r in read_rows(out)}
    assert (run.timed, run.failed, len(rows)) == (4, 0, 4)          # one line each: the retry's, not the failure
    assert (tmp_path / tasks[1].name).exists() and rows[tasks[1].name]["eager"]["median_ms"] == 2.0


def test_an_out_of_memory_left_at_the_deadline_stays_pending(tmp_path, service):
    tasks, out = relu_tasks(2), tmp_path / "b.jsonl"
    baselines(tasks, "cpu", out, timer=OutOfMemoryOnce(tmp_path), roofline=False, service=service, max_seconds=1e-9)
    assert {r["task"] for r in read_rows(out)} <= {tasks[0].name}     # task 2 not recorded as failed
