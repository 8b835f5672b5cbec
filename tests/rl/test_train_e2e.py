"""`cuda-agent train all` for real with the shipped CPU recipe (rl/driver/config/run.cpu.yaml: verl's CPU
platform, the tiny model, the bundled task, 2 steps a stage): the warm-up (verl's PPO with a critic,
single-turn replies judged through the reward, 2 epochs so clipping can act), its checkpoints merged;
collect (the warmed-up actor in the cuda_agent loop, frozen); RFT (verl's SFT trainer) on the
collected runs that pass the filter and the recipe's recorded run; collect_rft (RFT's actor);
value pretraining (the critic alone, rollout `null`, those runs replayed); agentic PPO (the
cuda_agent loop) from RFT's actor and the pretrained critic. A finished stage is skipped; a stage
killed after its last checkpoint is finished by merging it, without running verl again."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from typer.testing import CliRunner  # noqa: E402

from cuda_agent.cli import app  # noqa: E402
from cuda_agent.journal import read_rows  # noqa: E402
from cuda_agent.rl.driver.stages import CONFIG_DIR, STAGES  # noqa: E402

RECIPE = CONFIG_DIR / "run.cpu.yaml"


def train(*args: str) -> tuple[int, str, float]:
    t0 = time.monotonic()
    result = CliRunner().invoke(app, ["train", *args, "--quiet"])
    return result.exit_code, result.output, time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.long
def test_the_shipped_cpu_recipe_runs_every_stage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, seconds = train("all", "--config", str(RECIPE))
    assert code == 0, out
    root = tmp_path / "runs" / "cpu"
    rows = read_rows(root / "stages.jsonl")
    finished = {r["stage"]: r for r in rows if r["event"] == "finished"}
    started = {r["stage"]: r for r in rows if r["event"] == "started"}
    assert [r["stage"] for r in rows if r["event"] == "finished"] == list(STAGES)

    warmup = read_rows(root / "warmup" / "metrics.jsonl")
    assert [s["step"] for s in warmup] == [1, 2]
    for key in ("critic/vf_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "response_length/mean",
                "critic/vf_explained_var", "seconds/rollout", "seconds/training"):
        assert all(key in s for s in warmup), key
    assert any(s["actor/ppo_kl"] != 0.0 for s in warmup)   # the second epoch trains off the sampling policy
    assert warmup[0]["milestone/failed"] == 1.0   # a random model's replies are never a solution
    assert finished["warmup"]["summary"]["clip_fraction"]["mean"] >= 0.0
    verdicts = read_rows(root / "warmup" / "rewards.jsonl")
    assert len(verdicts) == 2 * 1 * 2 and all(v["score"] == -1.0 for v in verdicts)   # steps x batch x n
    critic = json.loads((root / "warmup" / "critic" / "config.json").read_text())
    assert critic.get("num_labels") == 1 or critic.get("id2label", {}).keys() == {"0"}

    # collect: the warmed-up actor, frozen, 2 runs of the one task; RFT and value read them
    warmed = finished["warmup"]["outputs"]["actor"]
    assert started["collect"]["inputs"]["actor"] == warmed
    assert finished["collect"]["outputs"]["trajectories"] == 2
    assert not (root / "collect" / "checkpoints").exists()   # nothing trained
    assert started["rft"]["inputs"]["trajectories"][0] == finished["collect"]["outputs"]["runs"]
    assert started["rft"]["inputs"]["candidates"] == 3 and started["rft"]["inputs"]["kept"] == 1   # the recorded run
    rft_actor = finished["rft"]["outputs"]["actor"]
    assert started["collect_rft"]["inputs"]["actor"] == rft_actor
    assert started["value"]["inputs"]["trajectories"][0] == finished["collect_rft"]["outputs"]["runs"]
    assert started["value"]["inputs"]["replayed"] == 3
    value = read_rows(root / "value" / "metrics.jsonl")
    assert len(value) == 2 and all("critic/vf_loss" in s and "actor/pg_loss" not in s for s in value)   # critic only

    assert f"actor_rollout_ref.model.path={rft_actor}" in started["agentic"]["overrides"]
    assert f"critic.model.path={root / 'value' / 'critic'}" in started["agentic"]["overrides"]
    agentic = read_rows(root / "agentic" / "metrics.jsonl")
    assert len(agentic) == 2 and all("actor/pg_loss" in s and s["critic/score/mean"] == -1.0 for s in agentic)
    assert len(list((root / "agentic" / "runs").iterdir())) == 2 * 1 * 2   # steps x batch x n, a run folder each
    for part in ("actor", "critic"):
        assert (Path(finished["agentic"]["outputs"][part]) / "config.json").is_file()
    assert (root / "plots" / "seconds.png").is_file() and (root / "plots" / "overview.png").is_file()

    code, out, _ = train("warmup", "--config", str(RECIPE))   # finished: skipped, nothing rerun
    assert code == 0 and "skipped" in out, out

    # killed after verl's last checkpoint, before the merge: the rerun merges, verl does not run again
    again = tmp_path / "again"
    again.mkdir()
    monkeypatch.chdir(again)
    shutil.copytree(root / "warmup" / "checkpoints", again / "runs" / "cpu" / "warmup" / "checkpoints")
    shutil.copytree(root / "tiny_model", again / "runs" / "cpu" / "tiny_model")
    (again / "runs" / "cpu" / "stages.jsonl").write_text(json.dumps({"stage": "warmup", "event": "started"}) + "\n")
    code, out, _ = train("warmup", "--config", str(RECIPE))
    assert code == 0 and read_rows(again / "runs" / "cpu" / "stages.jsonl")[-1]["event"] == "finished", out
    assert "verl.trainer.main_ppo" not in (again / "runs" / "cpu" / "warmup" / "train.log").read_text()
    assert (again / "runs" / "cpu" / "warmup" / "actor" / "config.json").is_file()
    print(f"all stages: {seconds:.0f} s")
