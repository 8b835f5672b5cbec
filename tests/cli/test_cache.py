"""`cuda-agent cache` and `cuda-agent cache prune` on a CUDA_AGENT_HOME of the test's own."""

from __future__ import annotations

from typer.testing import CliRunner

from cuda_agent.cli import app


def test_cache_shows_the_homes_parts_and_prune_trims_the_build_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_HOME", str(tmp_path))
    (tmp_path / "build" / "objects").mkdir(parents=True)
    (tmp_path / "build" / "objects" / "k.o").write_bytes(bytes(3 << 20))
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "b.json").write_text("{}")
    shown = CliRunner().invoke(app, ["cache"])
    assert shown.exit_code == 0, shown.output
    assert "build" in shown.output and "3.0 MB" in shown.output and "baselines" in shown.output
    pruned = CliRunner().invoke(app, ["cache", "prune", "--max-size", "1M", "--keep-recent", "0"])
    assert pruned.exit_code == 0, pruned.output
    assert "build cache: 3.0 MB -> 0 B; removed 1 entries" in pruned.output
    assert not (tmp_path / "build" / "objects" / "k.o").exists() and (tmp_path / "baselines" / "b.json").exists()
