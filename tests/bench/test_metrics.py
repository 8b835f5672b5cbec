"""Metrics on hand-built results with answers worked out by hand."""

from __future__ import annotations

import math

import pytest

from cuda_agent.bench import metrics

from .synthetic import row

# A: 2.0x eager, 1.5x compile   B: 0.5x, 0.8x   C: failed   D: 1.04x, 1.02x (under the 5% margin)
# E: correct but not profiled
ROWS = [row("A", 1, 1, True, 2.0, 1.5), row("B", 1, 2, True, 0.5, 0.8), row("C", 2, 3, False),
        row("D", 2, 4, True, 1.04, 1.02), row("E", 3, 5, True, None, None)]


def test_geomean_counts_failures_and_unprofiled_as_one():
    assert metrics.geomean_speedup(ROWS, "eager") == pytest.approx((2.0 * 0.5 * 1.0 * 1.04 * 1.0) ** (1 / 5))
    assert metrics.geomean_speedup(ROWS, "compile") == pytest.approx((1.5 * 0.8 * 1.02) ** (1 / 5))


def test_geomean_correct_only_skips_failures_and_unprofiled():
    assert metrics.geomean_speedup(ROWS, "eager", correct_only=True) == pytest.approx((2.0 * 0.5 * 1.04) ** (1 / 3))
    assert metrics.geomean_speedup([row("C", 1, 1, False)], "eager", correct_only=True) is None


def test_a_failed_row_with_a_speedup_left_in_it_counts_as_failed():
    bad = dict(row("X", 1, 1, False), speedup_vs_eager=50.0)
    assert metrics.speedup(bad, "eager") is None
    assert metrics.fast_p([bad], 1.0) == 0.0


def test_fast_p_is_kernelbench_definition():
    assert metrics.fast_p(ROWS, 0.0) == pytest.approx(4 / 5)     # the pass rate, unprofiled E included
    assert metrics.fast_p(ROWS, 1.0) == pytest.approx(2 / 5)     # A and D
    assert metrics.fast_p(ROWS, 1.5) == pytest.approx(1 / 5)     # A
    assert metrics.fast_p(ROWS, 2.0) == 0.0                      # strictly greater: 2.0 is not > 2.0
    assert metrics.fast_p(ROWS, 1.0, "compile") == pytest.approx(2 / 5)


def test_margin_rates_use_the_reward_margin():
    assert metrics.MARGIN == 0.05
    assert metrics.faster_rate(ROWS, "eager") == pytest.approx(2 / 5)
    assert metrics.faster_rate(ROWS, "eager", metrics.MARGIN) == pytest.approx(1 / 5)   # D's 1.04x is not enough
    assert metrics.faster_rate(ROWS, "compile", metrics.MARGIN) == pytest.approx(1 / 5)
    exactly = [row("F", 1, 1, True, 1.05, 1.05)]
    assert metrics.faster_rate(exactly, "eager", metrics.MARGIN) == 1.0                 # >= like the reward


def test_reward_distribution_in_milestone_order():
    assert metrics.reward_distribution(ROWS) == {"failed": 1, "correct": 3, "faster_than_eager": 0,
                                                 "faster_than_compile": 1}
    assert metrics.mean_reward(ROWS) == pytest.approx((3 + 1 - 1 + 1 + 1) / 5)


def test_by_level_groups_then_overall():
    summaries = metrics.by_level(ROWS)
    assert [s.group for s in summaries] == ["level 1", "level 2", "level 3", "overall"]
    assert [s.tasks for s in summaries] == [2, 2, 1, 5]
    level2 = summaries[1]
    assert level2.pass_rate == 0.5 and level2.faster_eager == 0.5 and level2.faster_eager_margin == 0.0
    assert level2.geomean_eager == pytest.approx(math.sqrt(1.04))
    assert summaries[-1].fast_p_eager == {"0": pytest.approx(0.8), "1": pytest.approx(0.4),
                                          "1.5": pytest.approx(0.2), "2": 0.0}


def test_sol_fraction_counts_only_correct_solutions():
    r = row("A", 1, 1, True, 2.0, 1.5, eager_ms=1.0, compile_ms=0.8, sol_ms=0.25)
    assert metrics.sol_fraction(r, "eager") == pytest.approx(0.25)
    assert metrics.sol_fraction(r, "compile") == pytest.approx(0.25 / 0.8)
    assert metrics.sol_fraction(r, "solution") == pytest.approx(0.25 / 0.5)
    failed = row("C", 1, 2, False, eager_ms=1.0, sol_ms=0.25)
    failed["solution"] = {"median_ms": 0.01}
    assert metrics.sol_fraction(failed, "solution") is None
    assert metrics.sol_fraction(row("N", 1, 3, True, 1.0, 1.0, sol_ms=None), "eager") is None
    assert metrics.median_sol_fraction([r, failed], "eager") == pytest.approx(0.25)


def test_empty_results_give_zero_rates_and_no_geomean():
    s = metrics.summarize([])
    assert s.tasks == 0 and s.pass_rate == 0.0 and s.geomean_eager is None


def test_a_set_of_one_level_or_none_is_summarized_once():
    no_level = [dict(r, level=None) for r in ROWS]
    assert metrics.level_groups(no_level) == {} and [s.group for s in metrics.by_level(no_level)] == ["overall"]
    one_level = [dict(r, level=2) for r in ROWS]
    assert [s.group for s in metrics.by_level(one_level)] == ["overall"]
    mixed = [dict(r, level=None) if r["task"] == "E" else r for r in ROWS]
    assert list(metrics.level_groups(mixed)) == ["level 1", "level 2", "no level"]
