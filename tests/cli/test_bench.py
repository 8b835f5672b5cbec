"""The bench commands end to end on the CPU, with no harness run needed (no solutions)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from cuda_agent.cli.bench import register
from cuda_agent.journal import read_rows

app = typer.Typer()
register(app)


@app.callback()
def _root() -> None:
    """Several commands, so typer keeps their names."""


@pytest.mark.slow
def test_bench_without_solutions_reports_failures(tmp_path):
    (tmp_path / "solutions").mkdir()
    out = tmp_path / "out"
    args = ["bench", "--tasks", "examples", "--solutions", str(tmp_path / "solutions"), "--out", str(out),
            "--device", "cpu", "--no-roofline", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summaries = json.loads(result.output.strip().splitlines()[-1])
    assert summaries[-1]["group"] == "overall" and summaries[-1]["pass_rate"] == 0.0
    rows = read_rows(out / "results.jsonl")
    assert rows and all(r["reason"] == "no solution" for r in rows)
    for name in ("report.md", "report.html", "summary.json", "bench.json"):
        assert (out / name).is_file()
    again = CliRunner().invoke(app, args)                     # resumes: nothing left to do
    assert again.exit_code == 0 and len(read_rows(out / "results.jsonl")) == len(rows)


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
