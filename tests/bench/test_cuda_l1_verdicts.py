"""benchmarks/cuda_l1_verdicts.py: CUDA-L1's kernels as bench's tasks and solutions, and the runtime-verdict count
(issue 24: >= 95% of the 210 get one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_each_row_is_a_runtime_verdict_a_refusal_a_build_failure_or_none():
    from cuda_l1_verdicts import summarize, verdict_of

    rows = [{"task": "a", "stage": "done", "correct": True, "reward": 2.0},
            {"task": "b", "stage": "correctness", "correct": False, "reward": -1.0},
            {"task": "c", "stage": "profile", "correct": False, "reward": -1.0, "fault": "solution"},
            {"task": "d", "stage": "static", "correct": False, "reward": -1.0},
            {"task": "e", "stage": "build", "correct": False, "reward": -1.0},
            {"task": "f", "stage": "run", "correct": False, "reward": -1.0, "fault": "harness"},
            {"task": "g", "stage": "correctness", "correct": False, "reward": -1.0, "fault": "reference"}]
    assert [verdict_of(r) for r in rows] == ["runtime", "runtime", "runtime", "static", "build", "no verdict",
                                             "no verdict"]
    s = summarize(rows, expected=10)
    assert s["runtime_verdict"] == 3 and s["runtime_verdict_rate"] == 0.3 and not s["met"]
    assert s["runtime_outcomes"] == {"correct": 1, "failed at correctness": 1, "failed at profile": 1}
    assert summarize(rows[:3], expected=3)["met"]


def test_the_report_of_a_run_lists_its_set_and_what_was_not_judged(tmp_path):
    ref = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    lines = [{"level_id": 1, "task_id": 3, "ref_code": ref, "custom_code": "print(1)"},
             {"level_id": 2, "task_id": 7, "ref_code": ref, "custom_code": None},
             {"level_id": 3, "task_id": 9, "ref_code": ref, "custom_code": "print(2)"}]
    src = tmp_path / "h100.json"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "run"
    (out / "bench").mkdir(parents=True)
    (out / "bench" / "results.jsonl").write_text(json.dumps(
        {"task": "L1_3", "stage": "static", "correct": False, "reward": -1.0, "reason": "rule broken: x"}) + "\n")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cuda_l1_verdicts.py"), "--cuda-l1", str(src),
                           "--out", str(out), "--report"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "solutions").iterdir()) == ["L1_3.py", "L3_9.py"]   # rows with a kernel
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["solutions"], summary["judged"], summary["verdicts"]) == (2, 1, {"static": 1})
    assert "not finished: 1 solutions left" in done.stdout and "| L1_3 | static | rule broken: x |" in done.stdout
