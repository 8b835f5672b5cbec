"""rl.metrics: one line per step from verl's per-launch files (a resumed launch's steps win), the
share of replies at each milestone from the rollout dumps, and the plots."""

from __future__ import annotations

import json

import pytest

from cuda_agent.journal import read_rows
from cuda_agent.rl.metrics import collect, milestone_of, write_plots


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
