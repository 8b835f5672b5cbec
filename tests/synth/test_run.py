"""The whole pipeline on the CPU backend: a small dataset end to end, resumed, loadable."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from cuda_agent.cli.synth import synth_app
from cuda_agent.synth.pipeline import SynthError, synthesize
from cuda_agent.synth.run import Candidates, Run
from cuda_agent.tasks import load_tasks

from .conftest import HF_FAMILIES


def test_journal_survives_a_line_cut_by_a_kill(tmp_path: Path):
    path = tmp_path / "candidates.jsonl"
    path.write_text(json.dumps({"index": 0, "filter": "window"}) + "\n" + '{"index": 1, "filt')
    journal = Candidates(path)
    assert set(journal.records) == {0}  # candidate 1 is redone
    journal.append({"index": 1, "filter": "eager"})
    assert set(Candidates(path).records) == {0, 1}


def test_resume_skips_done_candidates(catalog, cpu_config):
    from cuda_agent.synth.compose import ProgramComposer

    Candidates(cpu_config.state_dir / "candidates.jsonl").append({"index": 0, "filter": "window"})
    Candidates(cpu_config.state_dir / "candidates.jsonl").append({"index": 2, "filter": "eager"})
    run = Run(cpu_config, ProgramComposer(catalog.usable()))
    assert [run._claim() for _ in range(3)] == [1, 3, 4]


@pytest.mark.slow
def test_small_dataset_end_to_end_then_resumed_without_loss_or_duplicates(catalog, cpu_config, tmp_path):
    out = cpu_config.out
    cmd = typer.main.get_command(synth_app)
    args = ["--out", str(out), "--count", "1", "--device", "cpu", "--window", "0.02,20", "--quiet", "--json",
            "--max-candidates", "12", "--hf-families", ",".join(HF_FAMILIES)]
    if cpu_config.kernelbench is None:
        args += ["--kernelbench", "none"]
    cmd(args, standalone_mode=False)
    first = Candidates(cpu_config.state_dir / "candidates.jsonl").records
    assert sum(r["filter"] == "accepted" for r in first.values()) == 1
    # A second, longer run on the same OUT continues where the first stopped.
    cpu_config.count, cpu_config.jsonl = 2, True
    rows, files, run = synthesize(cpu_config)
    assert len(rows) == 2 and len({r["fingerprint"] for r in rows}) == 2
    lines = (cpu_config.state_dir / "candidates.jsonl").read_text().splitlines()
    indices = [json.loads(line)["index"] for line in lines]
    assert len(indices) == len(set(indices)) and set(first) <= set(indices)
    for path in files:
        ts = load_tasks(path)
        assert not ts.errors and len(ts.tasks) == 2
        meta = ts.tasks[0].metadata
        assert meta["composer"] == "program" and meta["eager_ms"] > 0 and meta["compile_ms"] > 0
        assert meta["filter_versions"]["compile"] and meta["ops"]
    assert (cpu_config.state_dir / "summary.md").exists()
    cpu_config.composer = "llm"
    try:
        synthesize(cpu_config)
        raise AssertionError("changing the composer on resume must be refused")
    except SynthError as e:
        assert "composer" in str(e)


def test_dataset_loads_with_hugging_face_datasets(tmp_path):
    import pytest

    datasets = pytest.importorskip("datasets")
    from cuda_agent.synth.pipeline import write_dataset

    from .test_filters import task

    path = write_dataset([{"name": "t0", "code": task("return x"), "ops": ["Linear"]}], tmp_path / "d.parquet")[0]
    ds = datasets.load_dataset("parquet", data_files=str(path))["train"]
    assert ds[0]["name"] == "t0" and ds[0]["ops"] == ["Linear"]
