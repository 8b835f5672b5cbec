"""`cuda-agent train` for real on the CPU platform with the tiny model: the warm-up (verl's PPO with
a critic, single-turn replies judged through the reward) for 2 steps, its checkpoints merged, then
RFT (verl's SFT trainer) on a recorded agent run, from the warm-up's merged actor."""

from __future__ import annotations

import json
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
def test_warmup_then_rft_on_the_cpu(tmp_path, tiny_model):
    run = tmp_path / "run.yaml"
    run.write_text(f"""out: out
model: {tiny_model}
platform: cpu
tasks: [{EXAMPLES_DIR / 'scale_bias_relu.py'}, {HACK_TASKS}]
val_fraction: 0
trajectories: [{RUN}]
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
    print(f"warmup: {seconds:.0f} s")
