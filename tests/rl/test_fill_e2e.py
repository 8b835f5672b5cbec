"""The fill family's two stages for real on the CPU (verl's CPU platform, the tiny model): fill_rft (SFT
on correct examples, 1 step) feeds fill (PPO with a critic, 2 steps), which judges the 73 held-out prompts
through the reward route before its first step and after each step (fill.yaml's test_freq, here 1; the
CPU overlay turns validation off, so the test turns it on again), so the
held-out figures of a run live in its own metrics and `validation/N.jsonl`, read by
benchmarks/rl/ops_by_step.py. A random policy never passes: this shows the wiring, not learning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from typer.testing import CliRunner  # noqa: E402

from cuda_agent.cli import app  # noqa: E402
from cuda_agent.journal import read_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.long
def test_fill_ppo_judges_the_held_out_prompts_inside_the_run(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(f"out: {tmp_path / 'run'}\nmodel: tiny\nplatform: cpu\ndevice: cpu\n")
    for args in (["fill_rft", "fill_rft:trainer.total_training_steps=1"],
                 ["fill", "fill:trainer.total_training_steps=2", "fill:trainer.test_freq=1", "fill:trainer.save_freq=2",
                  "fill:trainer.val_before_train=true",
                  "fill:data.train_batch_size=2", "fill:actor_rollout_ref.actor.ppo_mini_batch_size=1"]):
        result = CliRunner().invoke(app, ["train", args[0], "--config", str(run), "--quiet", *args[1:]])
        assert result.exit_code == 0, result.output
    stage = tmp_path / "run" / "fill"
    metrics = read_rows(stage / "metrics.jsonl")
    key = "val-aux/cuda_agent_fill/correct/mean@1"
    assert [m["step"] for m in metrics if key in m] == [0, 1, 2]      # the starting actor, then each step
    for step in (0, 1, 2):
        rows = read_rows(stage / "validation" / f"{step}.jsonl")
        assert len(rows) == 73 and all("true_score" in r and r["true_score"] == -1.0 for r in rows)
    table = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl" / "ops_by_step.py"), str(stage / "validation"),
                            "--rft-ops", "affine", "clamp"], capture_output=True, text=True, check=True).stdout
    assert "| 0 | 0.000 | 0/10 | 0/45 | 0/18 |" in table, table
