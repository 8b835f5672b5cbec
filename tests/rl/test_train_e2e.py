"""`cuda-agent train` for real on the CPU platform with the tiny model, 2 steps a stage: the warm-up
(verl's PPO with a critic, single-turn replies judged through the reward), its checkpoints merged;
RFT (verl's SFT trainer) on a recorded agent run, from the warm-up's merged actor; value
pretraining (the critic alone, rollout `null`, the recorded run replayed) from the warm-up's critic;
agentic PPO (the cuda_agent loop) from RFT's actor and the pretrained critic. A stage killed after
its last checkpoint is finished by merging it, without running verl again."""

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
from cuda_agent.tasks import EXAMPLES_DIR  # noqa: E402

HERE = Path(__file__).resolve().parent
HACK_TASKS = HERE.parent / "hacks" / "tasks"
RUN = HERE / "fixtures" / "scale_bias_relu.cpu.trajectory.jsonl"


def train(*args: str) -> tuple[int, str, float]:
    t0 = time.monotonic()
    result = CliRunner().invoke(app, ["train", *args, "--quiet"])
    return result.exit_code, result.output, time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.long
def test_the_four_stages_on_the_cpu(tmp_path, tiny_model, agent_toml):
    run = tmp_path / "run.yaml"
    run.write_text(f"""out: out
model: {tiny_model}
platform: cpu
tasks: [{EXAMPLES_DIR / 'scale_bias_relu.py'}, {HACK_TASKS}]
val_fraction: 0
trajectories: [{RUN}]
agent_config: {agent_toml}
stages:
  warmup: {{trainer.total_training_steps: 2, trainer.save_freq: 2}}
""")
    code, out, seconds = train("warmup", "--config", str(run))
    assert code == 0, out
    root = tmp_path / "out"
    done = read_rows(root / "stages.jsonl")[-1]
    assert done["stage"] == "warmup" and done["event"] == "finished", done
    for part in ("actor", "critic"):
        assert (root / "warmup" / part / "config.json").is_file()
    critic = json.loads((root / "warmup" / "critic" / "config.json").read_text())
    assert critic.get("num_labels") == 1 or critic.get("id2label", {}).keys() == {"0"}
    steps = read_rows(root / "warmup" / "metrics.jsonl")
    assert [s["step"] for s in steps] == [1, 2]
    assert all("critic/vf_loss" in s and "actor/entropy" in s for s in steps)
    assert steps[0]["milestone/failed"] == 1.0   # a random model's replies are never a solution
    verdicts = read_rows(root / "warmup" / "rewards.jsonl")
    assert len(verdicts) == 2 * 4 * 2 and all(v["score"] == -1.0 for v in verdicts)   # steps x batch x n
    assert (root / "plots" / "reward.png").is_file() and (root / "plots" / "overview.png").is_file()

    code, out, _ = train("warmup", "--config", str(run))   # finished: skipped, nothing rerun
    assert code == 0 and "skipped" in out, out

    # killed after verl's last checkpoint, before the merge: the rerun merges, verl does not run again
    again = tmp_path / "again.yaml"
    again.write_text(run.read_text().replace("out: out", "out: out2"))
    shutil.copytree(root / "warmup" / "checkpoints", tmp_path / "out2" / "warmup" / "checkpoints")
    (tmp_path / "out2" / "stages.jsonl").write_text(json.dumps({"stage": "warmup", "event": "started"}) + "\n")
    code, out, _ = train("warmup", "--config", str(again))
    assert code == 0 and read_rows(tmp_path / "out2" / "stages.jsonl")[-1]["event"] == "finished", out
    assert "verl.trainer.main_ppo" not in (tmp_path / "out2" / "warmup" / "train.log").read_text()
    assert (tmp_path / "out2" / "warmup" / "actor" / "config.json").is_file()

    code, out, _ = train("rft", "--config", str(run))
    assert code == 0, out
    rft = read_rows(root / "stages.jsonl")[-1]
    assert rft["stage"] == "rft" and rft["event"] == "finished"
    assert any(o.startswith(f"model.path={root / 'warmup' / 'actor'}") for o in read_rows(root / "stages.jsonl")[-2]["overrides"])
    actor = Path(rft["outputs"]["actor"])
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(actor) is not None
    losses = [s["train/loss"] for s in read_rows(root / "rft" / "metrics.jsonl")]
    assert len(losses) >= 1 and all(loss > 0 for loss in losses)

    # the rest in one go: warmup and rft are skipped, value (the critic alone on the recorded run,
    # replayed by cuda_agent_replay, rollout null) and agentic (the cuda_agent loop) run
    code, out, _ = train("all", "--config", str(run), "value:data.train_batch_size=1",
                         "value:actor_rollout_ref.actor.ppo_mini_batch_size=1")
    assert code == 0 and "warmup: finished before; skipped" in out and "rft: finished before; skipped" in out, out
    rows = read_rows(root / "stages.jsonl")
    started = {r["stage"]: r for r in rows if r["event"] == "started"}
    finished = {r["stage"]: r for r in rows if r["event"] == "finished"}
    assert set(finished) == {"warmup", "rft", "value", "agentic"}
    assert f"actor_rollout_ref.model.path={actor}" in started["value"]["overrides"]
    assert f"critic.model.path={root / 'warmup' / 'critic'}" in started["value"]["overrides"]
    assert f"actor_rollout_ref.model.path={actor}" in started["agentic"]["overrides"]
    assert f"critic.model.path={root / 'value' / 'critic'}" in started["agentic"]["overrides"]
    value = read_rows(root / "value" / "metrics.jsonl")
    assert len(value) == 2 and all("critic/vf_loss" in s and "actor/pg_loss" not in s for s in value)   # critic only
    assert all(s["critic/score/mean"] == 3.0 for s in value)   # the recorded run's reward
    agentic = read_rows(root / "agentic" / "metrics.jsonl")
    assert len(agentic) == 2 and all("actor/pg_loss" in s and s["critic/score/mean"] == -1.0 for s in agentic)
    assert len(list((root / "agentic" / "runs").iterdir())) == 2 * 4 * 2   # steps x batch x n, a run folder each
    for part in ("actor", "critic"):
        assert (Path(finished["agentic"]["outputs"][part]) / "config.json").is_file()
    print(f"warmup: {seconds:.0f} s")
