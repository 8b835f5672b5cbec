"""Issue 24's proof file (benchmarks/reward_fidelity/summary.json) is what its script makes from the raw
results committed beside it: no figure in it is typed by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("reward_fidelity", REPO / "benchmarks" / "reward_fidelity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_summary_is_remade_from_its_sources():
    committed = json.loads((REPO / "benchmarks" / "reward_fidelity" / "summary.json").read_text())
    assert _script().summary() == committed


def test_the_demos_spread_is_the_worst_run_of_each_kind_and_missing_figures_are_listed():
    s = _script().summary()
    runs = s["demo"]["runs"]
    idle = [r["vs_eager_spread_pct"] for r in runs if r["busy"] == 0]
    assert s["demo"]["idle_spread_pct"] == max(idle) and len(idle) >= 3
    warm = next(r for r in runs if r["file"] == "device_2026-11-27e/c_paired_w5.json")
    assert warm["vs_eager_spread_pct"] == 7.86 and warm["evaluations"] == 5  # one evaluation's solution 26.9 us, 25.0 the rest
    earlier = next(r for r in s["demo"]["earlier_runs"] if r["file"] == "device_2026-11-27/h100_paired_idle.json")
    assert earlier["vs_eager_spread_pct"] == 7.72                             # the judge of 20 ms windows: not counted
    assert s["demo"]["evals_per_hour"] == 1287  # the worst of two runs (2026-11-28 B: a fresh machine, 24 evaluations)
    busy = [r["vs_eager_spread_pct"] for r in runs if r["busy"] > 0]
    assert s["demo"]["busy_spread_pct"] == max(busy) == 7.97  # 2026-11-27f B: one evaluation's solution and compile 7-8% slow
    medians = {}  # the between-machines figure: the spread of the machines' medians of their runs' medians
    for r in runs:
        if r["busy"] == 0:  # like with like: the machines' idle runs
            medians.setdefault(r["machine"], []).append(r["vs_eager_median"])
    by_machine = [sorted(v)[len(v) // 2] if len(v) % 2 else sum(sorted(v)[len(v) // 2 - 1:len(v) // 2 + 1]) / 2
                  for v in medians.values()]
    assert s["demo"]["machines"] == len(by_machine) >= 2
    assert s["demo"]["cross_machine_pct"] == round((max(by_machine) / min(by_machine) - 1) * 100, 2)
    assert "demo.busy_spread_pct" not in s["missing"] and "demo.cross_machine_pct" not in s["missing"]
    assert s["goals"]["demo spread <= 1% idle and busy"] is False
