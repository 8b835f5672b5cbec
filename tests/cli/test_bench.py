"""The bench commands end to end on the CPU, with no build needed (solutions the static checks refuse)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cuda_agent.cli import bench
from cuda_agent.cli.bench import register
from cuda_agent.journal import read_rows

REPO = Path(__file__).resolve().parents[2]
FALLBACK = REPO / "tests" / "hacks" / "cpu" / "torch_relu_fallback"   # refused by the static checks

app = typer.Typer()
register(app)


@app.callback()
def _root() -> None:
    """Several commands, so typer keeps their names."""


@pytest.mark.slow
def test_bench_of_refused_solutions_reports_failures(tmp_path):
    """End to end with no build: the one solution is refused by the static checks. (It used an empty
    solutions folder, which is now refused before any work: see the next test.)"""
    shutil.copytree(FALLBACK, tmp_path / "solutions" / "scale_bias_relu")
    out = tmp_path / "out"
    args = ["bench", "--tasks", "examples", "--solutions", str(tmp_path / "solutions"), "--out", str(out),
            "--device", "cpu", "--no-roofline", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summaries = json.loads(result.output.strip().splitlines()[-1])
    assert summaries[-1]["group"] == "overall" and summaries[-1]["pass_rate"] == 0.0
    rows = read_rows(out / "results.jsonl")
    assert rows and all(r["stage"] == "static" and r["reward"] == -1 for r in rows)
    for name in ("report.md", "report.html", "summary.json", "bench.json"):
        assert (out / name).is_file()
    again = CliRunner().invoke(app, args)                     # resumes: nothing left to do
    assert again.exit_code == 0 and len(read_rows(out / "results.jsonl")) == len(rows)


@pytest.mark.parametrize("layout, said", [
    ([], "the folder is empty"),
    (["scale_bias_relu_cpu/model_new.py"], "scale_bias_relu_cpu looks like scale_bias_relu's solution"),
    (["other_task/model_new.py", "notes.txt"], "it holds notes.txt, other_task"),
])
def test_a_solutions_folder_that_matches_no_task_is_refused_before_any_work(tmp_path, layout, said):
    """Issue 26: an empty folder, or the bundled benchmarks/solutions with its _cpu/_cuda names, scored
    "no solution" on every task with exit status 0."""
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for rel in layout:
        (solutions / rel).parent.mkdir(parents=True, exist_ok=True)
        (solutions / rel).write_text("")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["bench", "--tasks", "examples", "--solutions", str(solutions), "--out", str(out),
                                      "--device", "cpu"])
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output, result.output
    assert not out.exists()


def test_tasks_without_a_solution_are_named_in_a_warning(tmp_path, capsys):
    from cuda_agent.bench.solutions import SolutionsDir
    from cuda_agent.tasks import load_tasks

    tasks = load_tasks(str(REPO / "tests" / "hacks" / "tasks")).tasks
    (tmp_path / f"{tasks[0].name}.py").write_text("")
    missing = SolutionsDir(tmp_path).missing(tasks)
    assert [t.name for t in missing] == [t.name for t in tasks[1:]]
    bench._say_missing(missing, len(tasks), tmp_path)
    said = " ".join(capsys.readouterr().err.split())
    assert f"warning: {len(tasks) - 1} of {len(tasks)} tasks have no solution" in said and tasks[1].name in said


def test_bench_needs_exactly_one_mode(tmp_path):
    result = CliRunner().invoke(app, ["bench", "--tasks", "examples", "--out", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 2
    assert "--solutions" in result.output


def test_baselines_table_only_from_an_existing_file(tmp_path):
    out = tmp_path / "b.jsonl"
    out.write_text(json.dumps({"task": "scale_bias_relu", "level": None, "problem_id": None, "torch": "x",
                               "eager": {"median_ms": 2.0, "iqr_ms": 0.1},
                               "compile": {"median_ms": 1.0, "iqr_ms": 0.1}}) + "\n")
    result = CliRunner().invoke(app, ["baselines", "--tasks", "examples", "--out", str(out), "--table-only"])
    assert result.exit_code == 0, result.output
    assert "| scale_bias_relu |" in (tmp_path / "b.md").read_text()


def test_per_gpu_evaluators_reach_the_service_on_cuda_and_are_refused_on_the_cpu(tmp_path, monkeypatch):
    """`--per-gpu N`: N evaluators share each GPU (they take it alone to time). On the CPU one evaluator runs."""
    import cuda_agent.bench.run as run

    shutil.copytree(FALLBACK, tmp_path / "solutions" / "scale_bias_relu")
    args = ["bench", "--tasks", "examples", "--solutions", str(tmp_path / "solutions"), "--out", str(tmp_path / "out"),
            "--per-gpu", "3", "--no-roofline"]
    refused = CliRunner().invoke(app, [*args, "--device", "cpu"])
    assert refused.exit_code == 2 and "--per-gpu 3 is for CUDA devices" in " ".join(refused.output.split())

    seen = {}

    def fake_run_bench(tasks, spec, out, *, settings=None, **kw):
        seen["settings"] = settings
        raise run.BenchError("stopped here by the test")
    monkeypatch.setattr(bench, "check_device", lambda device: "cuda")
    monkeypatch.setattr(run, "run_bench", fake_run_bench)
    result = CliRunner().invoke(app, [*args, "--device", "cuda", "--gpus", "2"])
    assert "stopped here by the test" in result.output
    assert (seen["settings"].device, seen["settings"].gpus, seen["settings"].evaluators_per_device) == ("cuda", 2, 3)
