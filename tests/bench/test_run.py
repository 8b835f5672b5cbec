"""The benchmark loop: resume after a crash or a kill without redoing finished tasks, parallel
workers, and the settings check. A fake evaluator keeps these fast and independent of the harness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cuda_agent.journal import read_rows
from cuda_agent.bench.run import RESULTS, BenchError, BenchSpec, run_bench
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.result import EvalResult
from cuda_agent.measure import TimingStats

from .synthetic import relu_tasks

TESTS = Path(__file__).resolve().parent.parent


@dataclass
class FakeEvaluate:
    """Correct, 2x faster than eager, 1.5x faster than compile; logs each call to `log` (it runs
    on the service's evaluators, in other processes, so it says so in a file)."""

    log: Path | None = None
    sleep: float = 0.0

    def __call__(self, task, solution, config) -> EvalResult:
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(task.name + "\n")
        time.sleep(self.sleep)
        t = lambda ms: TimingStats(ms, ms, ms, ms, 0.0, 0.0, 10)  # noqa: E731
        return EvalResult(task=task.name, reward=3.0, correct=True, stage="done", reason="ok", device="cpu",
                          milestone="faster_than_compile", speedup_vs_eager=2.0, speedup_vs_compile=1.5,
                          eager=t(1.0), compile=t(0.75), solution=t(0.5))


def _solutions(tmp_path: Path, tasks) -> Path:
    d = tmp_path / "solutions"
    for t in tasks:
        (d / t.name).mkdir(parents=True)
        (d / t.name / "model_new.py").write_text("# solution")
    return d


def _spec(solutions: Path, roofline: bool = False, log: Path | None = None, sleep: float = 0.0) -> BenchSpec:
    return BenchSpec(device="cpu", eval_config=EvalConfig(device="cpu"), solutions=solutions,
                     roofline=roofline, evaluate=FakeEvaluate(log, sleep))


def _calls(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_resume_skips_finished_tasks_and_drops_a_truncated_line(tmp_path, service):
    tasks = relu_tasks(5)
    out = tmp_path / "out"
    out.mkdir()
    done = [{"task": t.name, "level": 1, "reward": 3.0, "correct": True, "flags": []} for t in tasks[:2]]
    partial = json.dumps({"task": tasks[2].name, "reward": 3.0})[:25]       # killed mid-write
    (out / RESULTS).write_text("".join(json.dumps(r) + "\n" for r in done) + partial)
    log = tmp_path / "calls.log"

    run = run_bench(tasks, _spec(_solutions(tmp_path, tasks), log=log), out, service=service, parallel=1)

    assert _calls(log) == [t.name for t in tasks[2:]]
    assert (run.skipped, run.evaluated) == (2, 3)
    rows = read_rows(out / RESULTS)
    assert [r["task"] for r in rows] == [t.name for t in tasks]          # the partial line is gone
    assert (out / RESULTS).read_text().endswith("\n")


def test_harness_errors_are_retried_on_resume(tmp_path, service):
    tasks = relu_tasks(2)
    out = tmp_path / "out"
    out.mkdir()
    rows = [{"task": tasks[0].name, "correct": False, "fault": "harness"},
            {"task": tasks[1].name, "correct": False, "flags": []}]
    (out / RESULTS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = tmp_path / "calls.log"
    run_bench(tasks, _spec(_solutions(tmp_path, tasks), log=log), out, service=service)
    assert _calls(log) == [tasks[0].name]


def test_task_without_solution_is_a_failure_not_an_evaluation(tmp_path, service):
    tasks = relu_tasks(3)
    log = tmp_path / "calls.log"
    run = run_bench(tasks, _spec(_solutions(tmp_path, tasks[:1]), log=log), tmp_path / "out", service=service,
                    parallel=1)
    assert _calls(log) == [tasks[0].name]
    assert [r["reason"] for r in run.rows] == ["ok", "no solution", "no solution"]
    assert [r["reward"] for r in run.rows] == [3.0, -1.0, -1.0]


def test_rows_carry_identity_and_roofline(tmp_path, service):
    tasks = relu_tasks(1)
    row = run_bench(tasks, _spec(_solutions(tmp_path, tasks), roofline=True), tmp_path / "out", service=service).rows[0]
    assert (row["task"], row["level"], row["problem_id"]) == (tasks[0].name, 1, 1)
    assert row["roofline"]["min_bytes"] == 2 * 4 * 64 * 32 and row["roofline"]["sol_ms"] > 0
    assert row["sol_fraction"]["eager"] == pytest.approx(row["roofline"]["sol_ms"] / 1.0)
    for key in ("reward", "correct", "speedup_vs_eager", "speedup_vs_compile", "reason"):
        assert key in row


def test_resuming_with_other_settings_is_refused(tmp_path, service):
    tasks = relu_tasks(1)
    out = tmp_path / "out"
    run_bench(tasks, _spec(_solutions(tmp_path, tasks)), out, service=service)
    other = BenchSpec(device="cpu", eval_config=EvalConfig(device="cpu"), solutions=tmp_path / "elsewhere",
                      roofline=False, evaluate=FakeEvaluate())
    with pytest.raises(BenchError, match="--restart"):
        run_bench(tasks, other, out, service=service)
    (tmp_path / "elsewhere").mkdir()
    assert run_bench(tasks, other, out, restart=True, service=service).evaluated == 1


def test_parallel_evaluators_evaluate_each_task_once(tmp_path, service):
    tasks = relu_tasks(6)
    log = tmp_path / "calls.log"
    assert service.evaluators == 2
    run = run_bench(tasks, _spec(_solutions(tmp_path, tasks), log=log, sleep=0.2), tmp_path / "out",
                    service=service)
    assert sorted(_calls(log)) == sorted(t.name for t in tasks)
    assert sorted(r["task"] for r in read_rows(tmp_path / "out" / RESULTS)) == sorted(t.name for t in tasks)
    assert run.evaluated == 6


_KILLABLE = """
import sys
sys.path.insert(0, {tests!r})
from dataclasses import dataclass
from pathlib import Path
from bench.test_run import _spec
from bench.synthetic import relu_tasks
from cuda_agent.bench.run import run_bench
tasks = relu_tasks(6)
run_bench(tasks, _spec(Path({solutions!r}), log=Path({log!r}), sleep=0.4), {out!r}, parallel=1)
"""


@pytest.mark.slow
def test_a_killed_run_resumes_without_redoing_finished_tasks(tmp_path, service):
    """The driver is killed mid-run (its service on the running Ray cluster goes with it); a new
    run redoes nothing that has a line."""
    import ray

    tasks = relu_tasks(6)
    solutions, out = _solutions(tmp_path, tasks), tmp_path / "out"
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address)
    script = _KILLABLE.format(tests=str(TESTS), solutions=str(solutions), out=str(out),
                              log=str(tmp_path / "first.log"))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while len(read_rows(out / RESULTS)) < 2:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no results within 60 s"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finished = [r["task"] for r in read_rows(out / RESULTS)]
    assert 2 <= len(finished) < 6

    log = tmp_path / "second.log"
    run = run_bench(tasks, _spec(solutions, log=log), out, service=service)
    assert set(_calls(log)) == {t.name for t in tasks} - set(finished)
    assert run.skipped == len(finished)
    assert sorted(r["task"] for r in read_rows(out / RESULTS)) == sorted(t.name for t in tasks)
