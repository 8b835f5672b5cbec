"""Finding each task's solution in a solutions folder.

Layouts, tried in this order for a task named N (as `cuda-agent tasks list` prints it):
1. `<dir>/N/`: a workspace (model_new.py + kernels/) or a folder holding a load_inline model_new.py;
2. `<dir>/N.py`: a single load_inline model_new.py;
3. KernelBench's generation scripts: `<dir>/level_<L>_problem_<P>_sample_<S>_kernel.py`, matched on
   the task's level and problem id; the lowest sample id is taken.
A task with none of these is a failure with reason "no solution".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.harness import EvalConfig, EvalResult
from cuda_agent.tasks import Task

KERNELBENCH_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
NO_SOLUTION = "no solution"


@dataclass
class SolutionsDir:
    """A folder of solutions in any of the layouts above."""

    root: Path
    _kernelbench: dict[tuple[int, int], list[tuple[int, Path]]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: no such folder; --solutions takes a folder with one "
                                    "solution per task (see `cuda-agent bench --help`)")
        for p in self.root.iterdir():
            m = KERNELBENCH_FILE.match(p.name)
            if m and p.is_file():
                key = (int(m[1]), int(m[2]))
                self._kernelbench.setdefault(key, []).append((int(m[3]), p))

    def candidates(self, task: Task) -> list[Path]:
        """The paths where `task`'s solution may be, in the order they are tried."""
        out = [self.root / task.name / "model_new.py", self.root / f"{task.name}.py"]
        if task.level is not None and task.problem_id is not None:
            out.append(self.root / f"level_{task.level}_problem_{task.problem_id}_sample_<lowest>_kernel.py")
        return out

    def find(self, task: Task) -> Path | None:
        """The solution to evaluate for `task` (a folder or a model_new.py file), or None."""
        folder = self.root / task.name
        if (folder / "model_new.py").is_file():
            return folder
        single = self.root / f"{task.name}.py"
        if single.is_file():
            return single
        samples = self._kernelbench.get((task.level, task.problem_id)) if task.level is not None else None
        if samples:
            return min(samples)[1]
        return None

    def names(self) -> set[str]:
        """Every task name a file or folder in the root may stand for (to warn about strays)."""
        return {p.name.removesuffix(".py") for p in self.root.iterdir() if not KERNELBENCH_FILE.match(p.name)}


def no_solution_result(task: Task, looked_for: list[Path], device: str, config: EvalConfig | None = None) -> EvalResult:
    """The failure recorded for a task that has no solution."""
    result = EvalResult.failed(task.name, "static", NO_SOLUTION, config or EvalConfig(), device=device)
    result.details["looked_for"] = [str(p) for p in looked_for]
    return result
