"""Which KernelBench `cuda-agent synth` keeps its tasks apart from: --kernelbench, else
$CUDA_AGENT_KERNELBENCH, else none, said (it used to default to a path outside the repository)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from cuda_agent.cli.synth import KERNELBENCH_ENV, _kernelbench


def test_without_a_kernelbench_the_similarity_filter_is_off_and_that_is_said(monkeypatch, capsys):
    monkeypatch.delenv(KERNELBENCH_ENV, raising=False)
    assert _kernelbench(None) is None
    said = " ".join(capsys.readouterr().err.split())
    assert "warning: no KernelBench to compare with, so the similarity filter is off" in said
    assert "--kernelbench FILE.jsonl" in said and KERNELBENCH_ENV in said
    assert _kernelbench(Path("none")) is None and capsys.readouterr().err == ""   # skipped knowingly: quiet


def test_the_environment_names_the_kernelbench_and_a_missing_one_is_an_error(tmp_path, monkeypatch, capsys):
    kb = tmp_path / "kb.jsonl"
    kb.write_text('{"name": "t", "code": "x"}\n')
    monkeypatch.setenv(KERNELBENCH_ENV, str(kb))
    assert _kernelbench(None) == kb
    assert _kernelbench(kb) == kb
    monkeypatch.setenv(KERNELBENCH_ENV, str(tmp_path / "gone.jsonl"))
    with pytest.raises(typer.Exit) as e:
        _kernelbench(None)
    said = " ".join(capsys.readouterr().err.split())
    assert e.value.exit_code == 2 and f"error: ${KERNELBENCH_ENV} {tmp_path / 'gone.jsonl'}: no such file" in said
