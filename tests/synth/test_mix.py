"""The mix: quotas from shares, a plan that keeps composing for the classes still short after the
filters, so the ACCEPTED set meets the mix; the default is close to KernelBench levels 1-3."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from cuda_agent.synth.categories import code_categories, task_class
from cuda_agent.synth.mix import KERNELBENCH_SHARES, Mix, MixError, Plan


def test_quotas_sum_to_the_count_and_follow_the_shares():
    mix = Mix({"conv": 0.5, "gemm": 0.3, "norm": 0.2})
    assert mix.quotas(10) == {"conv": 5, "gemm": 3, "norm": 2}
    assert sum(mix.quotas(7).values()) == 7 and mix.quotas(1) == {"conv": 1}
    assert sum(Mix().quotas(1000).values()) == 1000


def test_a_mix_with_too_little_core_or_unknown_classes_is_refused_with_what_to_do():
    with pytest.raises(MixError, match="raise those shares"):
        Mix({"conv": 0.3, "activation": 0.7})
    with pytest.raises(MixError, match="unknown task class"):
        Mix({"conv": 0.7, "convolution": 0.3})
    with pytest.raises(MixError, match="CLASS=SHARE"):
        Mix.parse("conv=lots")
    assert Mix.parse("free") is None and Mix.parse("kernelbench") == Mix()
    assert Mix.parse("conv=0.6,norm=0.4").quotas(5) == {"conv": 3, "norm": 2}


def test_the_default_mix_is_close_to_kernelbench_levels_1_to_3(kernelbench_jsonl):
    rows = [json.loads(line) for line in kernelbench_jsonl.read_text().splitlines()]
    classes = Counter(task_class(code_categories(r["code"])) for r in rows if r["level"] <= 3)
    total = sum(classes.values())
    kb = {c: n / total for c, n in classes.items()}
    ours = Mix().normalized
    distance = sum(abs(ours.get(c, 0) - kb.get(c, 0)) for c in set(ours) | set(kb)) / 2
    assert distance <= 0.1, (ours, kb)
    assert Mix().core_share >= 0.6 and sum(KERNELBENCH_SHARES.values()) == pytest.approx(1.0)


def simulate(plan: Plan, accept) -> list[dict]:
    """Candidates one at a time; `accept(want, index)` plays the filters."""
    rows, runs = [], 0
    while (claimed := plan.claim()) is not None and runs < 500:
        index, want = claimed
        ok = accept(want, index)
        plan.finish(index, want, ok)
        runs += 1
        if ok:
            rows.append({"index": index, "task_class": want})
    return rows


def test_a_class_the_filters_mostly_reject_is_drawn_until_the_accepted_set_meets_the_mix():
    mix = Mix({"conv": 0.5, "gemm": 0.3, "attention": 0.2})
    plan = Plan(mix, 10, run_seed=3)
    tries = Counter()

    def accept(want, index):  # the filters keep one attention candidate in four, every other one
        tries[want] += 1
        return want != "attention" or tries[want] % 4 == 0
    rows = simulate(plan, accept)
    assert plan.done
    chosen = plan.select(rows, lambda r: r["task_class"])
    assert Counter(r["task_class"] for r in chosen) == mix.quotas(10)
    assert plan.tried["attention"] == 4 * plan.accepted["attention"] == 8


def test_the_plan_is_deterministic_from_the_run_seed():
    def run(seed):
        plan = Plan(Mix(), 30, run_seed=seed)
        return [(r["index"], r["task_class"]) for r in simulate(plan, lambda want, i: i % 3 != 0)]
    assert run(5) == run(5) and run(5) != run(6)
    plan = Plan(Mix(), 30, run_seed=5)
    assert all(plan.class_at(i) == Plan(Mix(), 900, run_seed=5).class_at(i) for i in range(200))  # count aside


def test_candidates_in_flight_count_so_parallel_workers_do_not_overfill_a_class():
    plan = Plan(Mix({"conv": 0.5, "gemm": 0.5}), 2, run_seed=0)
    claims = [plan.claim() for _ in range(4)]
    assert {want for _, want in claims} == {"conv", "gemm"}  # four in flight at one in two: both classes covered
    assert all(plan.class_at(index) == want for index, want in claims)
    for index, want in claims:
        plan.finish(index, want, True)
    assert plan.done and plan.claim() is None


def parallel(seed: int, workers: int, order_seed: int, verdict) -> list[int]:
    """A run with `workers` candidates in flight, finishing in a shuffled order: the dataset's indices."""
    plan = Plan(Mix({"conv": 0.45, "gemm": 0.35, "attention": 0.2}), 12, run_seed=seed)
    order = random.Random(order_seed)
    flying, rows = [], []
    while True:
        while len(flying) < workers and (claimed := plan.claim()) is not None:
            flying.append(claimed)
        if not flying:
            break
        index, want = flying.pop(order.randrange(len(flying)))
        ok = verdict(index)
        plan.finish(index, want, ok)
        if ok:
            rows.append({"index": index, "task_class": want})
    return [r["index"] for r in plan.select(sorted(rows, key=lambda r: r["index"]), lambda r: r["task_class"])]


def test_the_dataset_is_the_same_for_any_number_of_workers_and_any_finishing_order():
    """Until 2026-11-27 a candidate's class was drawn from what had finished when it was claimed, so
    two runs with the same seed and different workers made different datasets."""
    def verdict(index):  # the filters' verdict is the candidate's own (index), not the run's order
        return random.Random(index).random() < (0.25 if index % 7 == 0 else 0.6)
    one = parallel(seed=4, workers=1, order_seed=0, verdict=verdict)
    assert len(one) == 12
    for workers, order_seed in [(3, 1), (8, 2), (16, 3), (8, 9)]:
        assert parallel(seed=4, workers=workers, order_seed=order_seed, verdict=verdict) == one
    assert parallel(seed=5, workers=1, order_seed=0, verdict=verdict) != one


def test_a_cancelled_candidate_is_handed_out_again():
    plan = Plan(Mix({"conv": 0.6, "gemm": 0.4}), 4, run_seed=1)
    index, want = plan.claim()
    plan.cancel(index)
    assert plan.claim() == (index, want) and plan.started == 1


def test_a_run_stopped_early_already_follows_the_mix():
    """Every class advances by the part of its quota it lacks, so a run cut short at a tenth of its
    count (a device call's time limit) is a small set of the same mix, not one class's first tasks."""
    mix = Mix()
    plan = Plan(mix, 1000, run_seed=0)
    for _ in range(100):  # every candidate accepted, one at a time
        index, want = plan.claim()
        plan.finish(index, want, True)
    for c, q in mix.quotas(1000).items():
        assert abs(plan.accepted[c] - q / 10) <= 1, (c, plan.accepted[c], q / 10)
    assert sum(plan.accepted[c] for c in ("conv", "gemm", "attention")) >= 60
