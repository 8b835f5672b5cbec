"""benchmarks/rl_step_time.py (issue 27, item 4): RL's time per step from runs' metrics.jsonl, read
from a real run's metrics (the 2026-11-26 H100 PPO run committed in benchmarks/rl/learning/)."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "benchmarks" / "rl" / "learning" / "ppo.metrics.jsonl"
sys.path.insert(0, str(ROOT / "benchmarks"))


def stage(tmp_path: Path, name: str, keep_steps: int | None = None) -> Path:
    folder = tmp_path / name / "fill"
    folder.mkdir(parents=True)
    lines = METRICS.read_text().splitlines()
    (folder / "metrics.jsonl").write_text("\n".join(lines[:keep_steps]) + "\n")
    return folder


def test_the_step_time_is_the_median_after_the_first_step_and_every_step_is_kept(tmp_path):
    from rl_step_time import step_times

    rows = [json.loads(line) for line in METRICS.read_text().splitlines()]
    times = [r["timing_s/step"] for r in sorted(rows, key=lambda r: r["step"])]
    got = step_times(stage(tmp_path, "g1"))
    assert got["steps"] == [round(t, 3) for t in times] and len(times) == 8
    assert got["step_s"] == round(statistics.median([round(t, 3) for t in times[1:]]), 3)
    assert got["step_s"] < times[0]  # the first step (warm-up) is not the figure
    assert set(got["parts_s"]) >= {"gen", "update_actor"}
    assert got["firm"] and not step_times(stage(tmp_path, "g1_short", keep_steps=3))["firm"]  # 2 after the first


def test_the_script_merges_rl_step_s_into_the_summary_and_refuses_a_run_without_steps(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"evals_per_hour": {"1": 1337, "2": 2018}}))
    one, two = stage(tmp_path, "g1"), stage(tmp_path, "g2", keep_steps=4)
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_step_time.py"), f"1={one}", f"2={two}",
                          "--summary", str(summary)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    merged = json.loads(summary.read_text())
    assert merged["evals_per_hour"] == {"1": 1337, "2": 2018}  # the scale benchmark's figures stay
    assert set(merged["rl_step_s"]) == {"1", "2"} and all(v > 0 for v in merged["rl_step_s"].values())
    assert merged["rl_step_firm"] == {"1": True, "2": True}
    assert "| 2 | 4 |" in run.stdout
    empty = tmp_path / "empty" / "fill"
    empty.mkdir(parents=True)
    (empty / "metrics.jsonl").write_text("")
    refused = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_step_time.py"), f"1={empty}"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "no step with 'timing_s/step'" in refused.stderr
    from rl_step_time import parse_run

    with pytest.raises(argparse.ArgumentTypeError, match="give GPUS=STAGE_FOLDER"):
        parse_run("two=/tmp/rl/fill")
