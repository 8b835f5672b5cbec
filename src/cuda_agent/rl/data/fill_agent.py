"""The fill family's multi-turn form: the same tasks (rl/data/fill.py) in cuda-agent's own agent loop, where
the policy can compile, verify and try again, and the measure is when it first passed (turn 1 vs turn k).

A task's workspace is the agent's usual one (model.py, SKILL.md, the harness's files) with the
family's solution already in place, but for the expression: model_new.py calls the fused kernel, and
kernels/ holds that kernel with `???` where the expression goes (tier 2: EPT at DEFAULT_EPT, free to
change). The rows are the agentic stage's (`agent_name` cuda_agent); two fields of `extra_info` make
them this family's, and the RL agent loop (rl/rollout/agent_loop.py) reads both:
- `start_files`: JSON text, path -> content: written into the workspace in place of its example
  kernel, as the write_file tool writes (so the protected files stay out of reach);
- `task_prompt`: the task message, in place of the agent config's `[prompts] task`: what is missing
  and where, the reference's expression and the kernel's line (as the single-turn prompt shows them),
  and how to check (edit the line, verify in the same reply, read the verdict, try again).

Every trajectory records its first passing verification (`rft.first_pass`: the turn and which
verify or profile call it was); the agent loop reports `pass_turn1` and `first_pass_turn` beside
`correct` (verl's validation metrics average them: pass at turn 1 against pass within the turns
given), and `runs_summary` gives pass after turn k for every k over a folder of runs, by operator.

The stages: `fill_agentic_rft` (SFT on scripted runs of these tasks that the harness passed:
rl/driver/fill_demos.py), `fill_collect` (a trained actor, frozen, on the held-out tasks: the measurement)
and `fill_agentic` (multi-turn PPO on the training tasks, validated on the held-out ones), in
rl/driver/train.py, with STAGE_OVERRIDES for a short conversation.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from cuda_agent.rl.data import fill
from cuda_agent.rl.data.rows import AGENTIC, FILL, agent_messages, rl_row, write_parquet

# A fill task takes a few turns, not the agentic stage's 40; and a small model's context (SmolLM2:
# 8192 tokens) holds the first messages (about 2,500 tokens with SKILL.md) and a few short replies.
STAGE_OVERRIDES = {"actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 6,
                   "actor_rollout_ref.rollout.multi_turn.max_user_turns": 6,
                   "data.max_prompt_length": 4096, "data.max_response_length": 4096}

TASK = """Make `{task_name}` fast on {device}. The reference is `model.py`:

```python
v = x * scale + bias
y = {expr}
```
`model_new.py` and the fused kernel in `kernels/` are written for you, but for one C expression of the \
float `v`, written `???` in the kernel:
```
{line}
```
Replace `???` with the expression that gives model.py's `y` (edit_file on {kernel}) and call verify in \
the same reply. If verify fails, read its verdict, fix the expression and verify again.{choice}"""
CHOICE = """ `constexpr int EPT` (1, 2, 4 or 8: the elements each thread takes, loaded as one vector) \
changes only the speed: profile gives the speed-ups and the reward."""


def start_files(item: fill.FillItem, device: str) -> dict[str, str]:
    """The workspace's starting point: the family's solution with `???` for the expression."""
    return fill.solution_files("???", device, None if item.tier == 1 else fill.DEFAULT_EPT)


def task_prompt(item: fill.FillItem, device: str) -> str:
    """The task message (a template of {task_name} and {device}, as the agent config's is)."""
    kernel = f"kernels/sanity.{'cu' if device == 'cuda' else 'cpp'}"
    line = next(ln.strip() for ln in start_files(item, device)[kernel].splitlines() if "???" in ln)
    text = TASK.format(task_name="@TASK@", device="@DEVICE@", expr=item.torch_expr.replace(fill.F + ".", "F."),
                       line=line, kernel=kernel, choice=CHOICE if item.tier == 2 else "")
    text = text.replace("{", "{{").replace("}", "}}")   # the agent formats it: braces of code stay braces
    return text.replace("@TASK@", "{task_name}").replace("@DEVICE@", "{device}")


def agent_row(item: fill.FillItem, index: int, device: str, agent_config: str | Path | None = None) -> dict[str, Any]:
    """One row of the agentic stage for `item`: its prompt the agent's first messages (for verl's
    length filter and a reader; the loop builds them again from the row)."""
    task = item.task(device)
    prompt = task_prompt(item, device)
    messages = agent_messages(task, device, agent_config)
    messages[-1] = {"role": "user", "content": prompt.format(task_name=task.name, device=device)}
    return rl_row(task, index, messages, AGENTIC, device, item.split, data_source=FILL, op=item.op.name,
                  seen=item.op.seen, answer=item.answer, tier=item.tier, task_prompt=prompt,
                  start_files=json.dumps(start_files(item, device)))


def write_fill_agent_data(out: str | Path, device: str, seed: int = 0, tier: int = 1,
                          agent_config: str | Path | None = None) -> tuple[Path, Path]:
    """train.parquet (the training tasks, shuffled by `seed`) and val.parquet (the held-out ones) of
    the multi-turn form in `out`."""
    out = Path(out)
    train = fill.items("train", device, tier)
    random.Random(seed).shuffle(train)
    rows = [agent_row(it, i, device, agent_config) for i, it in enumerate(train)]
    val = [agent_row(it, i, device, agent_config) for i, it in enumerate(fill.items("val", device, tier))]
    return write_parquet(rows, out / "train.parquet"), write_parquet(val, out / "val.parquet")


def runs_summary(folders: list[str | Path]) -> dict[str, Any]:
    """Pass after turn k (and after the k-th verification) over the agent runs in `folders`, with the
    same for the operators seen in training and those held out whole."""
    from cuda_agent.agent.trajectory import read_records
    from cuda_agent.rl.data.rft import pass_at_turns, trajectory_files

    unseen = {op.name for op in fill.OPS if not op.seen}
    runs = [read_records(p) for p in trajectory_files(folders)]
    ops = [str(next((r.get("task_origin") for r in rs if r.get("type") == "run"), "")).removeprefix("fill:")
           for rs in runs]
    return {**pass_at_turns(runs), "seen_ops": pass_at_turns([r for r, op in zip(runs, ops) if op not in unseen]),
            "unseen_ops": pass_at_turns([r for r, op in zip(runs, ops) if op in unseen])}
