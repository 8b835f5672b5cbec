"""rl.driver.metrics: one line per step from verl's per-launch files (a resumed launch's steps win), the
share of replies at each milestone from the rollout dumps, and the plots."""

from __future__ import annotations

import json

import pytest

from cuda_agent.journal import read_rows
from cuda_agent.rl.driver.metrics import collect, milestone_of, write_plots


def lines(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_resumed_launch_replaces_the_steps_it_redid_and_milestones_come_from_the_replies(tmp_path):
    stage = tmp_path / "warmup"
    lines(stage / "metrics" / "attempt-1.jsonl", [{"step": 1, "data": {"critic/score/mean": -1.0, "note": "x"}},
                                                  {"step": 2, "data": {"critic/score/mean": 0.0}}])
    lines(stage / "metrics" / "attempt-2.jsonl", [{"step": 2, "data": {"critic/score/mean": 0.5}},
                                                  {"step": 3, "data": {"critic/score/mean": 1.5}}])
    lines(stage / "rollouts" / "3.jsonl", [{"score": s} for s in (-1.0, 1.0, 3.0, 3.0)])
    rows = collect(stage)
    assert [(r["step"], r["critic/score/mean"]) for r in rows] == [(1, -1.0), (2, 0.5), (3, 1.5)]
    assert "note" not in rows[0]   # only numbers
    assert rows[2]["milestone/faster_than_compile"] == 0.5 and rows[2]["milestone/failed"] == 0.25
    assert read_rows(stage / "metrics.jsonl") == rows
    assert milestone_of(2.0) == "faster_than_eager" and milestone_of(0.5) == "other"


def test_plots_cover_every_stage_with_metrics(tmp_path):
    pytest.importorskip("matplotlib")
    for stage, key in (("warmup", "critic/score/mean"), ("rft", "train/loss")):
        lines(tmp_path / stage / "metrics" / "attempt-1.jsonl", [{"step": i, "data": {key: float(i)}} for i in (1, 2)])
        collect(tmp_path / stage)
    written = {p.name for p in write_plots(tmp_path, ["warmup", "rft", "value", "agentic"])}
    assert written == {"reward.png", "sft_loss.png", "overview.png"}


def test_each_step_has_its_seconds_by_part_and_a_stage_its_summary(tmp_path):
    from cuda_agent.rl.driver.metrics import summary

    stage = tmp_path / "warmup"
    timers = {"timing_s/gen": 20.0, "timing_s/old_log_prob": 1.0, "timing_s/values": 0.5, "timing_s/adv": 0.1,
              "timing_s/update_critic": 1.5, "timing_s/update_actor": 1.4, "timing_s/step": 25.0}
    lines(stage / "metrics" / "attempt-1.jsonl", [
        {"step": 1, "data": {**timers, "actor/pg_clipfrac": 0.0, "critic/vf_explained_var": -3.0}},
        {"step": 2, "data": {**timers, "actor/pg_clipfrac": 0.25, "critic/vf_explained_var": 0.5}}])
    lines(stage / "rollouts" / "1.jsonl", [{"score": -1.0, "eval_seconds": s} for s in (0.0, 4.0, 6.0)])
    rows = collect(stage)
    assert rows[0]["seconds/rollout"] == 20.0 and rows[0]["seconds/training"] == pytest.approx(4.5)
    assert rows[0]["seconds/reward"] == 6.0 and rows[0]["reward/eval_seconds_sum"] == 10.0   # the longest verdict
    assert "seconds/reward" not in rows[1]   # no replies dumped, no colocated reward timer: unknown, not 0
    got = summary(rows)
    assert got["steps"] == 2 and got["clip_fraction"] == {"first": 0.0, "last": 0.25, "mean": 0.125}
    assert got["explained_variance"]["last"] == 0.5 and got["rollout_s"]["mean"] == 20.0
    assert "sft_loss" not in got
