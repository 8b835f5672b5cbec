"""Create the folder in which an agent (or a person) writes the fast version of one task."""

from __future__ import annotations

import ast
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.devices import check_device
from cuda_agent.tasks import Task
from cuda_agent.workspace.manifest import Manifest, sha256_file, write_manifest

TEMPLATES = Path(__file__).resolve().parent / "templates"
ACTIONS = ("compile", "verify", "profile")
HARNESS_FILES = ("binding.cpp", "binding_registry.h")


@dataclass(frozen=True)
class SkillParams:
    margin: float = 0.05
    tolerance: float = 1e-2
    trials: int = 5
    rewards: tuple[float, float, float, float] = (-1.0, 1.0, 2.0, 3.0)


@dataclass
class Workspace:
    path: Path
    task: Task
    device: str

    @property
    def model_new(self) -> Path:
        return self.path / "model_new.py"


def template_text(name: str) -> str:
    return (TEMPLATES / name).read_text()


def create_workspace(task: Task, dest: str | Path, device: str = "cuda", *, overwrite: bool = False,
                     skill: SkillParams = SkillParams()) -> Workspace:
    """Write SKILL.md, model.py, model_new.py, kernels/, the binding registry and the three
    commands into `dest`, and a signed manifest of the protected files."""
    device = check_device(device, present=False)  # a workspace may be made here for a GPU elsewhere
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{dest} exists and is not empty; choose a new folder or pass --force")
        shutil.rmtree(dest)
    (dest / "kernels").mkdir(parents=True)
    (dest / "utils").mkdir()
    (dest / "model.py").write_text(task.code)
    (dest / "model_new.py").write_text(starting_model_new(task))
    (dest / "SKILL.md").write_text(render_skill(task, device, skill))
    for name in HARNESS_FILES:
        shutil.copyfile(TEMPLATES / name, dest / name)
    example = TEMPLATES / ("kernels_cuda" if device == "cuda" else "kernels_cpu")
    for f in sorted(example.iterdir()):
        shutil.copyfile(f, dest / "kernels" / f.name)
    command = template_text("command.sh.tmpl")
    for action in ACTIONS:
        script = dest / "utils" / f"{action}.sh"
        script.write_text(command.format(action=action, python=sys.executable))
        script.chmod(0o755)
    protected = ["model.py", "SKILL.md", *HARNESS_FILES, *(f"utils/{a}.sh" for a in ACTIONS)]
    write_manifest(dest, Manifest(
        task_name=task.name, task_code=task.code, device=device, task_origin=task.origin,
        level=task.level, problem_id=task.problem_id,
        protected={p: sha256_file(dest / p) for p in protected}))
    return Workspace(dest, task, device)


# How the CUDA timing treats a solution (harness/replays.capture): kernels on the legacy default stream
# are not in a CUDA graph, so such a solution is timed per call, its launch overhead in its own figure, against
# baselines still timed by graph replays (measure's GRAPH_BASELINES).
CUDA_TIMING_NOTE = (
    "\n- Timing: where the reference can be captured in a CUDA graph, every side is timed by replaying\n"
    "  graphs of about 1 ms of calls (launch overhead left out of every side alike). Launch every kernel\n"
    "  on the stream the binding passes (`c10::cuda::getCurrentCUDAStream()`, as the example does), never\n"
    "  `<<<grid, block>>>` on the legacy default stream, and keep `forward` free of host synchronisation:\n"
    "  otherwise your solution is timed call by call, its launch overhead counted against it while its\n"
    "  baselines keep their graphs, and the verdict says why.")


def render_skill(task: Task, device: str, skill: SkillParams) -> str:
    r = skill.rewards
    return template_text("SKILL.md").format(
        task_name=task.name, device=device, device_upper=device.upper(),
        kernel_ext="cu" if device == "cuda" else "cpp",
        stream_note=" and the `cudaStream_t` to launch on" if device == "cuda" else "",
        timing_note=CUDA_TIMING_NOTE if device == "cuda" else "",
        margin_pct=round(skill.margin * 100), tol=skill.tolerance, trials=skill.trials,
        r_failed=r[0], r_correct=r[1], r_eager=r[2], r_compile=r[3])


def starting_model_new(task: Task) -> str:
    """ModelNew with the reference's constructor copied (so its state_dict loads) and a forward to write."""
    tree = ast.parse(task.code)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    lines = task.code.splitlines()
    init_src = "    def __init__(self):\n        super().__init__()\n"
    forward_args = ", x"
    for node in model.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            init_src = "\n".join(lines[start:node.end_lineno]) + "\n"
            init_src = re.sub(r"super\(\s*Model\s*,\s*self\s*\)", "super()", init_src)
        elif isinstance(node, ast.FunctionDef) and node.name == "forward":
            sig = ast.unparse(node.args)
            forward_args = sig[sig.index(","):] if "," in sig else ""
    return template_text("model_new.py.tmpl").format(init=init_src, forward_args=forward_args)
