"""The hand-written KernelBench solutions of benchmarks/bench_kernelbench.py: the CUDA ones pass the
strict static rules, and the CPU twins of two of them verify through the real harness."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.static import check_solution
from cuda_agent.tasks import Task, load_tasks

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_kernelbench.py"


def _script():
    spec = importlib.util.spec_from_file_location("bench_kernelbench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cuda_solutions_follow_the_strict_rules_and_the_hacks_do_not(tmp_path):
    script = _script()
    names = script.write_solutions(tmp_path, cuda=True)
    assert len(names) >= 10
    for name in names:
        files = {str(p.relative_to(tmp_path / name)): p.read_text() for p in (tmp_path / name).rglob("*")
                 if p.is_file() and p.suffix in (".py", ".cu", ".cpp", ".h")}
        report = check_solution(files, "strict")
        if name in script.HACKS:
            assert not report.ok, f"{name}: the hack ({script.HACKS[name][0]}) passed the static checks"
        else:
            assert report.ok, f"{name}: {report.reason}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [  # 33 s each on 2 cores: `pytest -m long` (CI stays under 20 minutes)
    pytest.param("31_ELU", marks=pytest.mark.long),
    pytest.param("5_Matrix_scalar_multiplication", marks=pytest.mark.long)])
def test_cpu_twin_verifies_on_shrunk_inputs(tmp_path, name, kernelbench_jsonl):
    from cuda_agent.harness.evaluation import evaluate

    _script().write_solutions(tmp_path, cuda=False)
    task = load_tasks(kernelbench_jsonl).find(name)
    small = re.sub(r"^(batch_size|dim|M|N) = .*$", r"\1 = 64", task.code, flags=re.M)
    shrunk = Task(name=task.name, code=small, origin=task.origin, level=1, problem_id=task.problem_id)
    result = evaluate(shrunk, tmp_path / name, EvalConfig(device="cpu", profile=False))
    assert result.correct, result.reason
