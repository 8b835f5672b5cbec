"""Finding a task's solution in each layout a solutions folder may have."""

from __future__ import annotations

import pytest

from cuda_agent.bench.solutions import NO_SOLUTION, SolutionsDir, no_solution_result
from cuda_agent.tasks import Task

from .synthetic import RELU


def _task(name: str = "19_ReLU", level: int | None = 1, pid: int | None = 19) -> Task:
    return Task(name=name, code=RELU, origin="x.py", level=level, problem_id=pid)


def test_workspace_folder(tmp_path):
    ws = tmp_path / "19_ReLU"
    (ws / "kernels").mkdir(parents=True)
    (ws / "model_new.py").write_text("# new")
    assert SolutionsDir(tmp_path).find(_task()) == ws


def test_single_model_new_file(tmp_path):
    (tmp_path / "19_ReLU.py").write_text("# new")
    assert SolutionsDir(tmp_path).find(_task()) == tmp_path / "19_ReLU.py"


def test_folder_wins_over_file(tmp_path):
    (tmp_path / "19_ReLU").mkdir()
    (tmp_path / "19_ReLU" / "model_new.py").write_text("# folder")
    (tmp_path / "19_ReLU.py").write_text("# file")
    assert SolutionsDir(tmp_path).find(_task()) == tmp_path / "19_ReLU"


def test_folder_without_model_new_is_not_a_solution(tmp_path):
    (tmp_path / "19_ReLU" / "kernels").mkdir(parents=True)
    assert SolutionsDir(tmp_path).find(_task()) is None


def test_kernelbench_generation_layout_takes_the_lowest_sample(tmp_path):
    for s in (3, 1, 2):
        (tmp_path / f"level_1_problem_19_sample_{s}_kernel.py").write_text(f"# sample {s}")
    (tmp_path / "level_2_problem_19_sample_0_kernel.py").write_text("# another level")
    assert SolutionsDir(tmp_path).find(_task()) == tmp_path / "level_1_problem_19_sample_1_kernel.py"
    other = _task("19_Other", level=2, pid=19)
    assert SolutionsDir(tmp_path).find(other) == tmp_path / "level_2_problem_19_sample_0_kernel.py"


def test_kernelbench_layout_needs_level_and_id(tmp_path):
    (tmp_path / "level_1_problem_19_sample_0_kernel.py").write_text("#")
    assert SolutionsDir(tmp_path).find(_task(level=None, pid=None)) is None


def test_missing_solution_is_a_failure_with_reason(tmp_path):
    d = SolutionsDir(tmp_path)
    t = _task()
    assert d.find(t) is None
    r = no_solution_result(t, d.candidates(t), "cpu")
    assert (r.correct, r.reward, r.reason, r.milestone) == (False, -1.0, NO_SOLUTION, "failed")
    assert str(tmp_path / "19_ReLU.py") in r.details["looked_for"]


def test_missing_folder_says_what_to_give(tmp_path):
    with pytest.raises(FileNotFoundError, match="--solutions"):
        SolutionsDir(tmp_path / "nope")
