"""The mix: quotas from shares, a plan that keeps composing for the classes still short after the
filters, so the ACCEPTED set meets the mix; the default is close to KernelBench levels 1-3."""
from __future__ import annotations

import json
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
    rows, index = [], 0
    while (want := plan.claim(index)) is not None and index < 500:
        ok = accept(want, index)
        plan.finish(index, want, ok)
        if ok:
            rows.append({"index": index, "task_class": want})
        index += 1
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
        return [r["task_class"] for r in simulate(plan, lambda want, i: i % 3 != 0)]
    assert run(5) == run(5) and run(5) != run(6)


def test_candidates_in_flight_count_so_parallel_workers_do_not_overfill_a_class():
    plan = Plan(Mix({"conv": 0.5, "gemm": 0.5}), 2, run_seed=0)
    wants = [plan.claim(i) for i in range(4)]
    assert set(wants) == {"conv", "gemm"}  # four in flight at one in two: both classes covered
    for i, w in enumerate(wants):
        plan.finish(i, w, True)
    assert plan.done and plan.claim(4) is None
