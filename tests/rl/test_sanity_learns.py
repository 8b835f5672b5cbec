"""The learning sanity run on the CPU: `cuda-agent train sanity` with the tiny model, verl's PPO with
a critic, every reward from the real harness through the evaluation service. The mean reward must
rise from about 0 to the fast solution's, and the hack must never be rewarded."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from typer.testing import CliRunner  # noqa: E402

from cuda_agent.cli import app  # noqa: E402
from cuda_agent.journal import read_rows  # noqa: E402

# Measured on 2 cores (2026-11-25): -0.3 at the start, 3.0 from step 14 on; 194 s for 30 steps.
STEPS = 20


@pytest.mark.slow
@pytest.mark.long
def test_mean_reward_rises_and_the_hack_is_never_rewarded(tmp_path, tiny_model):
    run = tmp_path / "run.yaml"
    run.write_text(f"""out: out
model: {tiny_model}
platform: cpu
sanity: {{train_tasks: 2, val_tasks: 1, shuffle: false}}
stages:
  sanity:
    data.max_prompt_length: 1024
    data.max_response_length: 2
    data.train_batch_size: 2
    actor_rollout_ref.rollout.n: 8
    actor_rollout_ref.actor.ppo_mini_batch_size: 2
    actor_rollout_ref.actor.optim.lr: 1e-2
    trainer.total_training_steps: {STEPS}
    trainer.val_before_train: false
    trainer.test_freq: -1
    trainer.save_freq: -1
""")
    t0 = time.monotonic()
    result = CliRunner().invoke(app, ["train", "sanity", "--config", str(run), "--quiet"])
    assert result.exit_code == 0, result.output
    steps = read_rows(tmp_path / "out" / "sanity" / "metrics.jsonl")
    assert len(steps) == STEPS
    reward = [s["critic/score/mean"] for s in steps]
    first, last = sum(reward[:5]) / 5, sum(reward[-5:]) / 5
    print(f"mean reward {first:.2f} -> {last:.2f} in {time.monotonic() - t0:.0f} s: {[round(r, 2) for r in reward]}")
    assert first < 1.0 and last >= 2.0 and last - first >= 1.5, reward
    verdicts = read_rows(tmp_path / "out" / "sanity" / "rewards.jsonl")
    hacks = [v for v in verdicts if "PyTorch computation" in v["reason"]]
    assert hacks and all(v["score"] == -1.0 for v in hacks)
    assert all(v["score"] == -1.0 for v in verdicts if v["milestone"] == "failed")
