"""rl.data.sanity: the learning sanity family. The choice is read from a reply as documented, and only
the hack breaks the rules. That each prepared solution gets the verdict it is made for from the real
harness (the hack must score -1) is judged through the reward's service, in test_reward.py."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.harness import check_solution  # noqa: E402
from cuda_agent.rl.data.sanity import (FIXED_ORDER, LETTERS, OPTIONS, chosen_files, choice, sanity_row,  # noqa: E402
                                       sanity_task, solution_files, write_sanity_data)
from cuda_agent.rl.rollout.evaluation import close_shared_services  # noqa: E402
from cuda_agent.rl.workers import reward  # noqa: E402

FAST = {"timing_budget_s": 0.2, "min_runs": 5, "build_workers": 0}   # device: the row's (cpu)


@pytest.fixture(scope="module", autouse=True)
def services():
    yield
    close_shared_services()


@pytest.mark.parametrize("reply, letter", [
    ("c", "c"), (" (B).", "b"), ("Answer: d", "d"), ("I choose c", "c"), ("Dc", "d"), ("xyz 42", None), ("", None),
])
def test_the_choice_is_the_first_letter_alone_else_the_first_in_a_word(reply, letter):
    assert choice(reply) == letter


def test_rows_list_every_option_under_a_letter_and_carry_its_files():
    row = sanity_row(0, "cpu", "train", shuffle=False)
    solutions = json.loads(row["extra_info"]["solutions"])
    assert [solutions[letter]["name"] for letter in LETTERS] == list(FIXED_ORDER)
    assert all(f"({letter})" in row["prompt"][1]["content"] for letter in LETTERS)
    assert row["data_source"] == "cuda_agent_sanity" and row["agent_name"] == "single_turn_agent"
    files, why = chosen_files("d", row["extra_info"])
    assert files == solutions["d"]["files"] and "fast" in why
    assert chosen_files("no letter here 42", row["extra_info"])[0] is None


def test_letters_are_shuffled_per_task_and_the_same_every_time():
    orders = [[json.loads(sanity_row(i, "cuda", "train")["extra_info"]["solutions"])[letter]["name"]
               for letter in LETTERS] for i in range(8)]
    assert len({tuple(o) for o in orders}) > 1
    assert orders[3] == [json.loads(sanity_row(3, "cuda", "train")["extra_info"]["solutions"])[letter]["name"]
                         for letter in LETTERS]


def test_data_files_hold_train_and_held_out_tasks(tmp_path):
    from cuda_agent.rl.data.rows import read_parquet

    train, val = write_sanity_data(tmp_path, "cpu", train_tasks=3, val_tasks=2, shuffle=False)
    names = ([r["extra_info"]["task"]["name"] for r in read_parquet(train)],
             [r["extra_info"]["task"]["name"] for r in read_parquet(val)])
    assert len(names[0]) == 3 and len(names[1]) == 2 and not set(names[0]) & set(names[1])


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["solutions-for-cpu", "solutions-for-gpu"])
def test_only_the_hack_breaks_the_rules(device):
    for index in range(6):
        _, op = sanity_task(index, device)
        for option in OPTIONS:
            report = check_solution(solution_files(op, option, device), "strict")
            assert report.ok == (option.name != "hack"), (index, option.name, report.reason)


@pytest.mark.long   # 32 s on 2 cores, a saving rather than a rule: `pytest -m long` (CI stays under 20 minutes)
def test_equal_replies_in_flight_share_one_evaluation():
    row = sanity_row(1, "cpu", "train", shuffle=False)
    svc = reward.service_for(reward.RewardSettings.from_kwargs({**FAST, "device": "cpu"}), "cpu")
    before = svc.stats["evaluations"]

    async def many():
        return await asyncio.gather(*[reward.compute_score(row["data_source"], "c", row["reward_model"]["ground_truth"],
                                                           row["extra_info"], device="cpu", **FAST) for _ in range(6)])

    verdicts = asyncio.run(many())
    assert len({json.dumps(v, sort_keys=True) for v in verdicts}) == 1 and verdicts[0]["score"] == 1.0
    assert svc.stats["evaluations"] - before == 1
