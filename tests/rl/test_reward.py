"""rl.workers.reward: a reply's score is the harness's verdict through the evaluation service;
unparsable replies, broken solutions, hacks, harness errors and timeouts never score above the failure
reward. Each family's replies are judged here too (the fill family's expressions, the sanity family's
letters), through the same service: starting one costs 15 s and more on 2 cores, so the families'
own modules test their rules without one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.harness import EvalResult  # noqa: E402
from cuda_agent.rl.data import fill  # noqa: E402
from cuda_agent.rl.data.rows import FILL, rl_rows  # noqa: E402
from cuda_agent.rl.data.sanity import LETTERS, sanity_row  # noqa: E402
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
FILL_FAST = {"timing_budget_s": 0.1, "min_runs": 5, "build_workers": 0, "correctness_trials": 3}
SANITY_FAST = {"timing_budget_s": 0.2, "min_runs": 5, "build_workers": 0}   # device: the row's (cpu)


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
    """Correctness alone (profile off: its torch.compile baseline is tens of seconds on 2 cores); the
    profiled route is the sanity family's and tier 2's below, which read what timing earns."""
    out = score(reply(HONEST), profile=False)
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

# --- each family's replies, judged through the same service ----------------------------------------


@pytest.mark.slow
def test_the_harness_judges_a_fill_reply():
    """The fill family: the correct expression of a held-out task is correct (reward >= 1); a plausible
    mistake (the sign of elu's negative branch) fails correctness; a reply outside the format never
    reaches the harness. The shuffled control keeps the true verdict beside the score it gives.
    (Correctness alone, profile off: what tier 2's speed earns is the next test's.)"""
    item = next(it for it in fill.items("val", "cpu") if it.op.name == "elu")
    row = fill.fill_row(item, 0, "cpu")
    args = (FILL, row["reward_model"]["ground_truth"], row["extra_info"])

    def judge(reply, **kw):
        return reward.score(args[0], reply, args[1], args[2], **{**FILL_FAST, "profile": False, **kw})

    good = judge(item.answer)
    assert good["correct"] == 1.0 and good["score"] >= 1.0 and good["true_score"] == good["score"], good
    wrong = judge(item.answer.replace("(expf(v) - 1.f)", "(1.f - expf(v))"))
    assert wrong["score"] == -1.0 and wrong["stage"] == "correctness", wrong
    bad = judge("I think the answer is x[i]")
    assert bad["stage"] == "parse" and bad["parsed"] == 0.0
    shuffled = judge(item.answer, shuffle=True)
    assert shuffled["true_score"] == good["score"] and shuffled["score"] in {good["score"], wrong["score"], -1.0}


@pytest.mark.slow
def test_every_tier2_choice_builds_and_is_correct():
    """The fill family's tier 2: every EPT of a held-out task builds and passes the real harness (CPU
    backend: the choice as the loop's chunk); a wrong expression with a valid choice still fails. Verdicts
    only, not timed: on a loaded 2-core CI machine the harness's clock check refused an honest choice's
    timing twice in a row (1.5 ms reported, 4.2 ms seen, 2026-11-28); speed is asserted on the device."""
    item = next(it for it in fill.items("val", "cpu", tier=2) if it.op.name == "elu")
    row = fill.fill_row(item, 0, "cpu")

    def judge(reply):
        return reward.score(FILL, reply, row["reward_model"]["ground_truth"], row["extra_info"],
                            **{**FILL_FAST, "profile": False})

    for ept in fill.EPT_CHOICES:
        v = judge(f"{item.answer}\nept={ept}")
        assert v["correct"] == 1.0 and v["score"] >= 1.0, (ept, v["stage"], v["reason"], v)
    wrong = judge(item.answer.replace("(expf(v) - 1.f)", "(1.f - expf(v))") + "\nept=8")
    assert wrong["score"] == -1.0 and wrong["stage"] == "correctness", wrong
    assert judge(item.answer)["stage"] == "parse"


@pytest.mark.slow
def test_each_prepared_solution_gets_the_verdict_it_is_made_for():
    """The sanity family: through the reward, the service and the harness on the CPU: the first task,
    every letter."""
    row = sanity_row(0, "cpu", "train", shuffle=False)
    solutions = json.loads(row["extra_info"]["solutions"])

    async def all_letters():
        return await asyncio.gather(*[reward.compute_score(row["data_source"], letter, row["reward_model"]["ground_truth"],
                                                           row["extra_info"], **SANITY_FAST)
                                     for letter in LETTERS])

    verdicts = dict(zip(LETTERS, asyncio.run(all_letters())))
    by_name = {solutions[letter]["name"]: verdicts[letter] for letter in LETTERS}
    assert by_name["hack"]["score"] == -1.0 and by_name["hack"]["stage"] == "static", by_name["hack"]
    assert by_name["broken"]["score"] == -1.0 and by_name["broken"]["stage"] == "correctness", by_name["broken"]
    assert by_name["slow"]["score"] == 1.0, by_name["slow"]
    fast = by_name["fast"]
    # Correct, and no more on the CPU: its speed-up over eager is the shared 2-core host's to flip
    # (0.49-3.7x between evaluations of an honest fused kernel). Speed is for tests on the device.
    assert fast["correct"] == 1.0 and fast["score"] >= 1.0, fast
