"""benchmarks/bench_scale.py (issue 27, item 3): `cuda-agent bench` on 1 and on N GPUs, the same set.
The set made of CUDA-L1's rows, the verdicts side by side, and (long) the whole script on the CPU backend."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HACKS = ROOT / "tests" / "hacks"
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_cuda_l1_set_takes_the_first_rows_with_a_kernel_of_each_level_on_their_own_references(tmp_path):
    from bench_scale import cuda_l1_set

    ref = (HACKS / "tasks" / "sbr_small.py").read_text()
    rows = [{"level_id": 1, "task_id": 3, "ref_code": ref, "custom_code": "# one"},
            {"level_id": 1, "task_id": 4, "ref_code": ref, "custom_code": None},      # no kernel: skipped
            {"level_id": 1, "task_id": 5, "ref_code": ref, "custom_code": "# two"},
            {"level_id": 1, "task_id": 6, "ref_code": ref, "custom_code": "# three"},  # past --per-level 2
            {"level_id": 2, "task_id": 9, "ref_code": ref, "custom_code": "# four"},
            {"level_id": 3, "task_id": 1, "ref_code": ref, "custom_code": "# five"}]  # level 3 not asked for
    source = tmp_path / "h100.json"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks, solutions = cuda_l1_set(source, per_level=2, levels=[1, 2], out=tmp_path / "set")
    got = [json.loads(line) for line in tasks.read_text().splitlines()]
    assert [(t["name"], t["level"], t["problem_id"]) for t in got] == [("L1_3", 1, 3), ("L1_5", 1, 5), ("L2_9", 2, 9)]
    assert all(t["code"] == ref for t in got)
    assert sorted(p.name for p in solutions.iterdir()) == ["L1_3.py", "L1_5.py", "L2_9.py"]
    assert (solutions / "L1_5.py").read_text() == "# two"


def test_verdicts_are_compared_by_reward_and_correctness_and_a_moved_correctness_is_named():
    from bench_scale import compare, table

    def row(reward: float, correct: bool, vs_eager: float | None = None) -> dict:
        return {"reward": reward, "correct": correct, "stage": "done" if correct else "correctness",
                "speedup_vs_eager": vs_eager, "speedup_vs_compile": None}

    runs = {1: {"wall_s": 100.0, "rows": {"a": row(2, True, 1.06), "b": row(1, True), "c": row(-1, False)}},
            2: {"wall_s": 55.0, "rows": {"a": row(1, True, 1.04), "b": row(1, True), "c": row(1, True)}}}
    got = compare(runs)
    assert got["tasks"] == 3 and got["same"] == 1
    moved = {d["task"]: d["correctness_moved"] for d in got["differ"]}
    assert moved == {"a": False, "c": True}  # a milestone crossed by timing; a correctness verdict moved
    text = table(runs, got)
    assert "| 2 | 3 | 55.0 | 1.82x |" in text and "1 of 3" in text and "c: " in text and "(correctness moved)" in text


@pytest.mark.long  # two bench runs on 2 cores: about two minutes
def test_the_script_runs_both_counts_from_homes_of_their_own_and_merges_the_wall_times(tmp_path):
    from bench_scale import main

    tasks, sol = tmp_path / "tasks", tmp_path / "sol"
    tasks.mkdir()
    for t in ("sbr_small", "linear_small"):
        shutil.copy(HACKS / "tasks" / f"{t}.py", tasks)
    for t, honest in (("sbr_small", "honest_fused"), ("linear_small", "honest_linear_params")):
        shutil.copytree(HACKS / "cpu" / honest, sol / t, ignore=shutil.ignore_patterns("expect.json"))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"rl_step_s": {"1": 40.0}}))
    got = main(["--tasks", str(tasks), "--solutions", str(sol), "--device", "cpu", "--gpus", "1", "2",
                "--out", str(tmp_path / "out"), "--summary", str(summary)])
    assert got["bench_verdicts"] == {"tasks": 2, "same": 2, "correctness_moved": 0}
    merged = json.loads(summary.read_text())
    assert merged["rl_step_s"] == {"1": 40.0} and set(merged["bench_wall_s"]) == {"1", "2"}
    assert (tmp_path / "out" / "g2" / "wall.json").exists()
