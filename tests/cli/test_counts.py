"""Counts and workers below 1 are a user's mistake, said in one line before any work starts (issue 26:
`synth --count 0`, `--count -2` and `baselines --workers 0` were accepted silently)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cuda_agent.cli import app


@pytest.mark.parametrize("args", [
    ["synth", "--out", "x.parquet", "--count", "0"],
    ["synth", "--out", "x.parquet", "--count", "-2"],
    ["synth", "--out", "x.parquet", "--workers", "0"],
    ["synth", "--out", "x.parquet", "--max-candidates", "0"],
    ["baselines", "--workers", "0"],
])
def test_a_count_below_one_is_refused_in_one_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    said = " ".join((result.output + (result.stderr if result.stderr_bytes else "")).replace("│", " ").split())
    assert result.exit_code == 2, said
    assert "Traceback" not in said and "Invalid value for" in said and "greater than or equal to 1" in said, said
    assert not any(tmp_path.iterdir())    # nothing was written
