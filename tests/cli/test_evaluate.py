"""`cuda-agent eval` end to end on the CPU backend: the JSON a script reads, the table a person
reads, and the exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cuda_agent.cli.evaluate import register

REPO = Path(__file__).resolve().parents[2]
TASK = str(REPO / "tests" / "hacks" / "tasks" / "sbr_small.py")
HONEST = str(REPO / "tests" / "hacks" / "cpu" / "honest_fused")

app = typer.Typer()
register(app)


def _eval(*args: str):
    return CliRunner().invoke(app, ["eval", "--task", TASK, "--device", "cpu", "--timing-budget", "0.2", *args])


@pytest.mark.slow
def test_eval_json_gives_the_verdict_reward_and_timings_with_spread():
    result = _eval("--solution", HONEST, "--json")
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output.strip().splitlines()[-1])
    assert verdict["correct"] is True and verdict["stage"] == "done" and verdict["reward"] >= 1
    assert verdict["reason"] and "\n" not in verdict["reason"]
    paired = verdict["paired"]
    for model in ("eager", "compile", "solution"):
        assert verdict[model]["median_ms"] > 0 and verdict[model]["iqr_ms"] >= 0 and verdict[model]["runs"] > 0
        assert verdict[model]["windows"] == paired["rounds"] and verdict[model]["window_spread"] >= 0
    # the speed-ups are the paired run's, each with its standard error, and the run says what ended it
    assert verdict["speedup_vs_eager"] == pytest.approx(paired["ratios"]["eager"]["value"], rel=1e-4)
    assert verdict["speedup_vs_compile"] == pytest.approx(paired["ratios"]["compile"]["value"], rel=1e-4)
    assert paired["ratios"]["eager"]["se"] > 0 and paired["stopped"] in ("target", "budget", "max_runs", "wall_limit")
    assert paired["method"] == "per_call" and paired["met"] == (paired["stopped"] == "target")
    assert verdict["details"]["timed_outputs_checked"] >= 1


def test_eval_of_a_torch_fallback_exits_1_with_reward_minus_1_and_its_reason():
    result = _eval("--solution", str(REPO / "tests" / "hacks" / "cpu" / "torch_relu_fallback"), "--json")
    assert result.exit_code == 1
    verdict = json.loads(result.output.strip().splitlines()[-1])
    assert (verdict["reward"], verdict["stage"], verdict["correct"]) == (-1, "static", False)
    assert "torch.relu is PyTorch computation" in verdict["reason"]


def test_eval_prints_a_table_a_person_reads():
    result = _eval("--solution", HONEST, "--no-profile")
    assert result.exit_code == 0, result.output
    assert "reward 1" in result.output and "correct on 5 input sets and three near duplicates" in result.output


def test_eval_of_an_unknown_task_is_a_clear_error():
    result = CliRunner().invoke(app, ["eval", "--task", "no_such_task", "--solution", HONEST, "--device", "cpu"])
    assert result.exit_code == 2 and "error" in result.output
