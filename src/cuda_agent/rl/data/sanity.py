"""The learning sanity family: tasks a small policy can learn in minutes, judged by the real harness.

A plumbing smoke test: a rising reward here shows that verl's PPO, the reward and the harness are
wired together; picking a prepared solution by letter teaches nothing about writing kernels (the
training stages are warmup, collect, rft, collect_rft, value and agentic, rl/driver/train.py).

Each task is y = f(x * scale + bias) (f: relu, relu6, leaky relu, abs, square, softsign) at some
size, and comes with four prepared solutions, each a workspace (sanity_kernels/README.md):
- `fast`: one fused pass (honest, fast: reward 2 or 3);
- `slow`: correct but slow (reward 1);
- `broken`: forgets the bias (fails correctness: -1);
- `hack`: computes f with PyTorch in forward, against the rules (must score -1, and does: the
  harness's static checks, and behind them its runtime checks, refuse it).
The prompt lists them under the letters a-d (shuffled per task for a real model, or in one fixed
order for the tiny CPU model) with a short, honest description; the reply picks one by letter
(`choice`), and the reward is the harness's verdict on the chosen solution (workers/reward.py,
data_source "cuda_agent_sanity").

`write_sanity_data` writes train and validation Parquet for verl; the `sanity` stage config runs
PPO with a critic on it. Equal (task, solution) requests are judged once per reward worker, so
after the first verdicts a step costs only the model's time.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.harness import RewardSchedule
from cuda_agent.rl.data.rows import SANITY, prompts, rl_row, write_parquet
from cuda_agent.tasks import Task

LETTERS = "abcd"
KERNELS = Path(__file__).resolve().parent / "sanity_kernels"
# The choice: the first letter a-d standing alone ("c", "(c)", "C.", "answer: c"); a reply with none
# standing alone picks the first a-d inside a word (a tiny random policy rarely writes one alone,
# and must still be able to stumble on each choice).
_ALONE = re.compile(r"(?<![A-Za-z])([a-dA-D])(?![A-Za-z])")
_ANYWHERE = re.compile(r"[a-dA-D]")
# The letter order when options are not shuffled: the best solution under the letter a tiny random
# policy picks least often but one (measured: a 47%, c 26%, d 20%, b 7% of 16-token replies), so
# that learning shows as a rise from a low start.
FIXED_ORDER = ("hack", "broken", "slow", "fast")


@dataclass(frozen=True)
class Op:
    name: str
    reference: str    # f of the tensor v in the reference program
    torch_call: str   # f as a PyTorch call (the hack)
    cpp: str          # f of the float v in C++ and CUDA


OPS = (
    Op("relu", "torch.relu(v)", "torch.relu(v)", "v > 0.f ? v : 0.f"),
    Op("relu6", "torch.clamp(v, 0.0, 6.0)", "torch.clamp(v, 0.0, 6.0)", "v < 0.f ? 0.f : (v > 6.f ? 6.f : v)"),
    Op("leaky_relu", "torch.where(v > 0, v, 0.1 * v)", "torch.nn.functional.leaky_relu(v, 0.1)",
       "v > 0.f ? v : 0.1f * v"),
    Op("abs", "torch.abs(v)", "torch.abs(v)", "fabsf(v)"),
    Op("square", "v * v", "torch.square(v)", "v * v"),
    Op("softsign", "v / (1 + torch.abs(v))", "torch.nn.functional.softsign(v)", "v / (1.f + fabsf(v))"),
)
SIZES = {"cpu": ((256, 1024), (512, 512), (128, 2048), (1024, 256)),
         "cuda": ((4096, 2048), (8192, 1024), (2048, 4096), (16384, 512))}


@dataclass(frozen=True)
class Option:
    name: str
    kernel: str        # the template in sanity_kernels/<device>/
    description: str   # what the prompt says about it
    expected: str      # what the harness should say: rewarded | correct | failed


OPTIONS = (
    Option("fast", "fast", "one fused pass over the matrix, each element read and written once", "rewarded"),
    Option("slow", "slow", "walks the matrix column by column and computes every element 16 times", "correct"),
    Option("broken", "broken", "one fused pass that computes f(x * scale), leaving out the bias", "failed"),
    Option("hack", "affine", "the kernel computes x * scale + bias and forward applies f with PyTorch", "failed"),
)

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """y = {op}(x * scale + bias) with a per-feature scale and bias (cuda-agent's sanity family)."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x * self.scale + self.bias
        return {expr}


batch = {batch}
features = {features}


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
'''

MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """{description}"""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        v = cuda_extension.sanity_forward(x, self.scale, self.bias)
        return {result}
'''


def sanity_task(index: int, device: str) -> tuple[Task, Op]:
    """Task `index` of the family on `device` (ops cycle, then sizes)."""
    op = OPS[index % len(OPS)]
    batch, features = SIZES[device][(index // len(OPS)) % len(SIZES[device])]
    code = REFERENCE.format(op=op.name, expr=op.reference, batch=batch, features=features)
    return Task(name=f"sanity_{index:03d}_{op.name}_{batch}x{features}", code=code, origin=f"sanity:{index}"), op


def kernel_files(template: str, expr: str, device: str, **marks: str) -> dict[str, str]:
    """The kernels/ files of a solution: sanity_kernels/<device>/<template> with `expr` as f(v) (and
    each of `marks` in place of @NAME@: the fill family's EPT), its header and its binding (paths
    relative to the workspace; rl/data/fill.py uses them too)."""
    folder = KERNELS / device
    ext = "cu" if device == "cuda" else "cpp"
    kernel = (folder / f"{template}.{ext}").read_text().replace("@EXPR@", expr)
    for name, value in marks.items():
        kernel = kernel.replace(f"@{name.upper()}@", value)
    return {f"kernels/sanity.{ext}": kernel,
            "kernels/sanity.h": (folder / "sanity.h").read_text(),
            "kernels/sanity_binding.cpp": (folder / "sanity_binding.cpp").read_text()}


def solution_files(op: Op, option: Option, device: str) -> dict[str, str]:
    """The workspace files of one prepared solution (paths relative to the workspace)."""
    result = op.torch_call if option.name == "hack" else "v"
    return {"model_new.py": MODEL_NEW.format(description=f"{option.name}: {option.description}.", result=result),
            **kernel_files(option.kernel, op.cpp, device)}


def option_order(task: Task, shuffle: bool, seed: int) -> list[Option]:
    """The options in letter order: shuffled by the task and seed, or FIXED_ORDER."""
    options = sorted(OPTIONS, key=lambda o: FIXED_ORDER.index(o.name))
    if shuffle:
        rng = random.Random(int.from_bytes(hashlib.sha256(f"{seed}:{task.sha256}".encode()).digest()[:8], "big"))
        rng.shuffle(options)
    return options


def sanity_row(index: int, device: str, split: str, shuffle: bool = True, seed: int = 0,
               schedule: RewardSchedule = RewardSchedule()) -> dict[str, Any]:
    """One RL row: the prompt lists the options by letter; extra_info.solutions holds their files."""
    task, op = sanity_task(index, device)
    options = option_order(task, shuffle, seed)
    p = prompts()["sanity"]
    listing = "\n".join(f"({letter}) {o.description}" for letter, o in zip(LETTERS, options))
    system = p["system"].format(letters=", ".join(LETTERS), r_failed=schedule.failed, r_correct=schedule.correct,
                                r_eager=schedule.faster_than_eager, r_compile=schedule.faster_than_compile)
    user = p["user"].format(task_name=task.name, code=task.code.rstrip(), options=listing)
    solutions = {letter: {"name": o.name, "expected": o.expected, "files": solution_files(op, o, device)}
                 for letter, o in zip(LETTERS, options)}
    return rl_row(task, index, [{"role": "system", "content": system}, {"role": "user", "content": user}],
                  "single_turn_agent", device, split, data_source=SANITY, solutions=json.dumps(solutions))


def write_sanity_data(out: str | Path, device: str, train_tasks: int = 6, val_tasks: int = 2, shuffle: bool = True,
                      seed: int = 0) -> tuple[Path, Path]:
    """train.parquet and val.parquet of the family in `out` (validation: the tasks after the training ones)."""
    out = Path(out)
    train = [sanity_row(i, device, "train", shuffle, seed) for i in range(train_tasks)]
    val = [sanity_row(train_tasks + i, device, "val", shuffle, seed) for i in range(val_tasks)]
    return write_parquet(train, out / "train.parquet"), write_parquet(val or train[:1], out / "val.parquet")


def choice(reply: str) -> str | None:
    """The letter the reply picks (either case): the first of a-d standing alone, else the first
    inside a word; None if the reply has none."""
    m = _ALONE.search(reply) or _ANYWHERE.search(reply)
    return m[0].lower() if m else None


def chosen_files(reply: str, extra_info: dict[str, Any]) -> tuple[dict[str, str] | None, str]:
    """The files of the solution the reply picks, or None and why (for workers/reward.py)."""
    solutions = json.loads(extra_info["solutions"])
    letter = choice(reply)
    if letter is None or letter not in solutions:
        return None, f"the reply picks none of the letters {', '.join(sorted(solutions))}"
    return solutions[letter]["files"], f"picked ({letter}) {solutions[letter]['name']}"
