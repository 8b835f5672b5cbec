"""rl.reward: a reply's score is the harness's verdict through the evaluation service; unparsable
replies, broken solutions, hacks, harness errors and timeouts never score above the failure reward."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.harness import EvalResult  # noqa: E402
from cuda_agent.rl.data.rows import rl_rows  # noqa: E402
from cuda_agent.rl.rollout.evaluation import close_shared_services  # noqa: E402
from cuda_agent.rl.workers import reward  # noqa: E402
from cuda_agent.tasks import load_file  # noqa: E402

HACKS = Path(__file__).resolve().parents[1] / "hacks"
TASK = load_file(HACKS / "tasks" / "sbr_small.py")
HONEST = (HACKS / "cpu" / "honest_inline" / "model_new.py").read_text()
# the same extension (its build is cached), called with the scale where the bias goes: wrong
BROKEN = HONEST.replace("fused.sbr_inline(x, self.scale, self.bias)", "fused.sbr_inline(x, self.scale, self.scale)")
HACK = HONEST.replace("return fused.sbr_inline(x, self.scale, self.bias)", "return torch.relu(x * self.scale + self.bias)")
FAST = {"device": "cpu", "timing_budget_s": 0.2, "min_runs": 5, "build_workers": 0}


def reply(code: str) -> str:
    return f"I fuse the three passes into one loop.\n```python\n{code}```\nThat is model_new.py."


def row():
    return rl_rows([TASK], "single_turn_agent", "cpu", "train")[0]


def score(text: str, **settings) -> dict:
    r = row()
    return reward.score(r["data_source"], text, r["reward_model"]["ground_truth"], r["extra_info"],
                        **{**FAST, **settings})


@pytest.fixture(scope="module", autouse=True)
def services():
    yield
    close_shared_services()


def test_extract_solution_wants_exactly_one_closed_python_block():
    assert reward.extract_solution(reply("x = 1\n")) == ("x = 1\n", "one ```python block")
    assert reward.extract_solution("no code at all")[0] is None
    assert "2 ```python blocks" in reward.extract_solution(reply("a = 1\n") + reply("b = 2\n"))[1]
    assert "not closed" in reward.extract_solution("```python\nclass ModelNew:\n")[1]   # cut at the length limit
    assert reward.extract_solution("```cpp\nint x;\n```\n```python\ny = 2\n```")[0] == "y = 2\n"


def test_unparsable_reply_scores_minus_one_with_a_reason_and_asks_no_harness():
    out = score("Here is my kernel: __global__ void k() {}")
    assert out["score"] == -1.0 and out["parsed"] == 0.0 and out["stage"] == "parse"
    assert "no ```python block" in out["reason"]


def test_a_harness_error_is_never_rewarded():
    result = EvalResult(task="t", reward=3.0, correct=True, stage="done", reason="evaluator died",
                        milestone="faster_than_compile", fault="harness")
    out = reward._from_result(result, reward.RewardSchedule())
    assert out["score"] == -1.0 and out["harness_error"] == 1.0 and out["correct"] == 0.0


def test_every_verdict_has_the_same_keys():   # verl stacks each key over the batch
    unparsable = reward.verdict(-1, "failed", "parse", "x", parsed=False)
    judged = reward._from_result(EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="ok",
                                            milestone="correct"), reward.RewardSchedule())
    assert unparsable.keys() == judged.keys()


def test_a_row_whose_code_is_not_its_ground_truth_is_refused():
    r = row()
    with pytest.raises(ValueError, match="does not match"):
        reward.score(r["data_source"], reply(HONEST), "0" * 64, r["extra_info"], **FAST)


def test_unknown_reward_settings_are_named():
    with pytest.raises(TypeError, match="timing_budget"):
        reward.RewardSettings.from_kwargs({"timing_budjet_s": 1})


@pytest.mark.slow
def test_honest_solution_is_rewarded_through_the_service():
    out = score(reply(HONEST))
    assert out["score"] >= 1.0 and out["correct"] == 1.0 and out["milestone"] != "failed", out


@pytest.mark.slow
def test_broken_solution_scores_minus_one():
    out = score(reply(BROKEN))
    assert out["score"] == -1.0 and out["stage"] == "correctness", out


@pytest.mark.slow
def test_hack_that_computes_in_pytorch_scores_minus_one():
    out = score(reply(HACK))
    assert out["score"] == -1.0 and out["stage"] == "static" and "PyTorch" in out["reason"], out


@pytest.mark.slow
def test_a_verdict_that_does_not_come_in_time_scores_minus_one():
    slow_twin = HONEST.replace("sbr_inline_ext", "sbr_inline_slow_twin")   # not judged yet: a fresh build
    out = score(reply(slow_twin), timeout_s=0.5)
    assert out["score"] == -1.0 and out["timed_out"] == 1.0 and out["stage"] == "timeout"
