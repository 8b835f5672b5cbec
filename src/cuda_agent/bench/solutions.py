"""Finding each task's solution in a solutions folder.

Layouts, tried in this order for a task named N (as `cuda-agent tasks list` prints it):
1. `<dir>/N/`: a workspace (model_new.py + kernels/) or a folder holding a load_inline model_new.py;
2. `<dir>/N.py`: a single load_inline model_new.py;
3. KernelBench's generation scripts: `<dir>/level_<L>_problem_<P>_sample_<S>_kernel.py`, matched on
   the task's level and problem id; the lowest sample id is taken.
A task with none of these is a failure with reason "no solution"; a folder in which no task finds its
solution is refused before any work (`missing`), as is usually a wrong folder or wrong names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.harness import EvalConfig, EvalResult
from cuda_agent.tasks import Task
from cuda_agent.usage import UsageError

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

    def missing(self, tasks: list[Task]) -> list[Task]:
        """The tasks with no solution here; UsageError when none of `tasks` has one (an empty folder, a
        wrong one, or solutions not named after their tasks)."""
        missing = [t for t in tasks if self.find(t) is None]
        if tasks and len(missing) == len(tasks):
            raise UsageError(self._nothing_matches(tasks))
        return missing

    def _nothing_matches(self, tasks: list[Task]) -> str:
        entries = sorted(p.name for p in self.root.iterdir() if not p.name.startswith("."))
        said = f"--solutions {self.root}: no solution for any of the {len(tasks)} selected tasks"
        if not entries:
            return f"{said}: the folder is empty; put each solution in DIR/TASK/ or DIR/TASK.py"
        near = [(e, t.name) for e in entries for t in tasks if e.removesuffix(".py").startswith(t.name + "_")]
        if near:
            entry, name = near[0]
            return (f"{said}: {entry} looks like {name}'s solution under another name (e.g. for one device); "
                    f"bench looks for {self.root / name}/ or {name}.py: copy or link it there")
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        names = ", ".join(t.name for t in tasks[:3]) + (", ..." if len(tasks) > 3 else "")
        return (f"{said}: it holds {shown}, and the tasks are {names}; name each solution DIR/TASK/ or DIR/TASK.py "
                "after its task as `cuda-agent tasks list` prints it (or KernelBench's "
                "level_L_problem_P_sample_S_kernel.py)")

    def names(self) -> set[str]:
        """Every task name a file or folder in the root may stand for (to warn about strays)."""
        return {p.name.removesuffix(".py") for p in self.root.iterdir() if not KERNELBENCH_FILE.match(p.name)}


def no_solution_result(task: Task, looked_for: list[Path], device: str, config: EvalConfig | None = None) -> EvalResult:
    """The failure recorded for a task that has no solution."""
    result = EvalResult.failed(task.name, "static", NO_SOLUTION, config or EvalConfig(), device=device)
    result.details["looked_for"] = [str(p) for p in looked_for]
    return result
