"""Datasets for verl: tasks -> RL prompt Parquet, trajectories -> SFT and replay Parquet.

RL rows (the columns verl's RLHFDataset reads; one row a task):
- `prompt`: chat messages. Single-turn: the system and user messages of prompts.toml
  [single_turn] (the reply format workers/reward.py reads). Agentic: the agent's own first messages
  (system with SKILL.md, and the task), as `cuda-agent optimize` starts a run; the agent loop
  (rl/rollout/agent_loop.py) builds them again itself from `extra_info.task` under RL's limits, so in those
  rows they serve verl's length filter and a reader.
- `data_source`: "cuda_agent" (synthesized tasks), "kernelbench" (held out, validation only),
  "cuda_agent_sanity" (rl/data/sanity.py), "cuda_agent_fill" (rl/data/fill.py).
- `agent_name`: "single_turn_agent" | "cuda_agent" | "cuda_agent_replay" (verl picks the loop).
- `reward_model.ground_truth`: the task's sha256 (workers/reward.py checks it against the task's code).
- `extra_info`: {index, task: {name, code, origin, level, problem_id} (what the agent loop reads),
  device, split}; replay rows add `trajectory` (an absolute path to a trajectory.jsonl, what the
  replay loop reads) and `reward` (its recorded reward).

KernelBench never enters training: a task whose name, code or normalized code (names, sizes and
docstrings aside: synth.similarity.fingerprint) matches a KernelBench task, or whose shingle
similarity reaches `max_similarity`, is dropped from the training rows and counted.

The held-out split is a function of the task's code and the seed alone (not of the dataset's
order or size), so a task stays on its side when the dataset grows.

SFT rows (verl's MultiTurnSFTDataset, through rl/workers/sft_dataset.py): `messages` (OpenAI chat
messages, tool-call arguments as JSON text: Parquet cannot store an empty struct, and every tool
has other argument names) and `tools` (the agent's tool schemas as one JSON text, for the same
reason: Parquet would give every tool the properties of all of them, as nulls; empty for
single-turn replies).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cuda_agent.harness import RewardSchedule
from cuda_agent.synth.similarity import ReferenceIndex, fingerprint
from cuda_agent.tasks import Task, load_dataset, load_tasks

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PROMPTS = Path(__file__).resolve().parent / "prompts.toml"
SINGLE_TURN, AGENTIC, REPLAY = "single_turn_agent", "cuda_agent", "cuda_agent_replay"
SOURCE, KERNELBENCH, SANITY, FILL = "cuda_agent", "kernelbench", "cuda_agent_sanity", "cuda_agent_fill"


def prompts() -> dict[str, dict[str, str]]:
    """The texts of prompts.toml."""
    return tomllib.loads(PROMPTS.read_text())


# --- which tasks may be trained on ------------------------------------------------------------


def _norm_name(name: str) -> str:
    return re.sub(r"^\d+_", "", name.removesuffix(".py")).strip("_").lower()


@dataclass
class KernelBenchGuard:
    """KernelBench's names, code hashes and normalized fingerprints, and its shingle index."""

    names: set[str] = field(default_factory=set)
    shas: set[str] = field(default_factory=set)
    prints: set[str] = field(default_factory=set)
    index: ReferenceIndex | None = None
    max_similarity: float = 0.9
    tasks: list[Task] = field(default_factory=list)

    @classmethod
    def load(cls, source: str | Path | None, max_similarity: float = 0.9) -> "KernelBenchGuard":
        """From a KernelBench JSONL dump, a checkout or any task source; None: an empty guard."""
        if source is None:
            return cls(max_similarity=max_similarity)
        tasks = load_tasks(source).tasks
        guard = cls(max_similarity=max_similarity, tasks=tasks)
        guard.names = {_norm_name(t.name) for t in tasks}
        guard.shas = {t.sha256 for t in tasks}
        guard.prints = {_fingerprint(t.code) for t in tasks}
        guard.index = ReferenceIndex([(t.name, t.code) for t in tasks])
        return guard

    def why_excluded(self, name: str, code: str | None = None, sha: str | None = None) -> str | None:
        """Why this task counts as KernelBench, or None when it may be trained on."""
        if _norm_name(name) in self.names:
            return f"its name matches KernelBench's {name!r}"
        sha = sha or (hashlib.sha256(code.encode()).hexdigest() if code else None)
        if sha in self.shas:
            return "its code is a KernelBench task's"
        if code and _fingerprint(code) in self.prints:
            return "its code is a KernelBench task's up to names, sizes and docstrings"
        if code and self.index is not None and self.index.refs:
            near = self.index.nearest(code)
            if near.score >= self.max_similarity:
                return f"{near.score:.2f} similar to KernelBench's {near.name}"
        return None


def _fingerprint(code: str) -> str:
    try:
        return fingerprint(code)
    except SyntaxError:
        return hashlib.sha256(code.encode()).hexdigest()


def held_out(task: Task, val_fraction: float, seed: int = 0) -> bool:
    """True when the task belongs to the held-out split (a hash of its code and the seed)."""
    digest = hashlib.sha256(f"{seed}:{task.sha256}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


@dataclass
class Split:
    train: list[Task]
    val: list[Task]
    excluded: dict[str, str]          # task name -> why it is never trained on


def split_tasks(tasks: Iterable[Task], guard: KernelBenchGuard, val_fraction: float = 0.05,
                seed: int = 0) -> Split:
    """Training and held-out tasks; duplicates (same code) kept once, KernelBench look-alikes dropped."""
    out = Split([], [], {})
    seen: set[str] = set()
    for task in tasks:
        if task.sha256 in seen:
            continue
        why = guard.why_excluded(task.name, task.code, task.sha256)
        if why:
            out.excluded[task.name] = why
            continue
        seen.add(task.sha256)
        if held_out(task, val_fraction, seed):
            out.val.append(task)
        else:
            out.train.append(task)
    return out


def load_training_tasks(sources: Iterable[str | Path]) -> list[Task]:
    """Every task of the given sources (synthesized datasets, folders, files), in order."""
    tasks: list[Task] = []
    for source in sources:
        path = Path(source)
        tasks += (load_dataset(path) if path.suffix in (".parquet", ".jsonl") else load_tasks(source)).tasks
    return tasks


# --- prompts ----------------------------------------------------------------------------------


def single_turn_messages(task: Task, device: str, schedule: RewardSchedule = RewardSchedule(),
                         tolerance: float = 1e-2) -> list[dict[str, str]]:
    """The single-turn warm-up's prompt: the reply format and rules, then the reference program."""
    p = prompts()["single_turn"]
    kind = "cuda" if device == "cuda" else "cpu"
    system = p["system"].format(
        device_upper=device.upper(), sources_hint=p[f"sources_{kind}"], example=p[f"example_{kind}"],
        example_sources=p[f"example_sources_{kind}"], tolerance=tolerance, margin_pct=round(schedule.margin * 100),
        r_failed=schedule.failed, r_correct=schedule.correct, r_eager=schedule.faster_than_eager,
        r_compile=schedule.faster_than_compile)
    user = p["user"].format(task_name=task.name, device=device, code=task.code.rstrip())
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def agent_messages(task: Task, device: str, config_path: str | Path | None = None) -> list[dict[str, str]]:
    """The agent's first messages for `task`, as `cuda-agent optimize` starts a run (the agent's
    config: its TOML, or the bundled one)."""
    from cuda_agent.agent.config import load_config
    from cuda_agent.agent.run import _first_messages  # the one place these messages are made
    from cuda_agent.workspace import create_workspace

    config = load_config(config_path)
    with tempfile.TemporaryDirectory(prefix="cuda_agent_prompt_") as tmp:
        workspace = create_workspace(task, Path(tmp) / "workspace", device).path
        return _first_messages(task, device, workspace, config)


def rl_row(task: Task, index: int, messages: list[dict[str, str]], agent_name: str, device: str,
           split: str, data_source: str = SOURCE, **extra: Any) -> dict[str, Any]:
    """One row of verl's RL dataset."""
    return {"data_source": data_source, "agent_name": agent_name, "prompt": messages, "ability": "cuda",
            "reward_model": {"style": "rule", "ground_truth": task.sha256},
            "extra_info": {"index": index, "task": {"name": task.name, "code": task.code, "origin": task.origin,
                                                    "level": task.level, "problem_id": task.problem_id},
                           "device": device, "split": split, **extra}}


def rl_rows(tasks: list[Task], agent_name: str, device: str, split: str, data_source: str = SOURCE,
            agent_config: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows of single-turn (`single_turn_agent`) or agentic (`cuda_agent`) prompts for `tasks`."""
    rows = []
    for i, task in enumerate(tasks):
        messages = (single_turn_messages(task, device) if agent_name == SINGLE_TURN
                    else agent_messages(task, device, agent_config))
        rows.append(rl_row(task, i, messages, agent_name, device, split, data_source))
    return rows


# --- trajectories -----------------------------------------------------------------------------


def clean_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as SFT data holds it: text content, tool-call arguments as JSON text."""
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [{"id": c.get("id") or f"call_{i}", "type": "function",
                              "function": {"name": c["function"]["name"],
                                           "arguments": _json_text(c["function"].get("arguments"))}}
                             for i, c in enumerate(calls)]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("train") is False:   # in the text, out of the loss (rl/workers/sft_dataset.py)
        out["train"] = False
    return out


def _json_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {})


def sft_row(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **meta: Any) -> dict[str, Any]:
    """One row of verl's multi-turn SFT dataset (`tools`: the agent's schemas, or None)."""
    return {"messages": [clean_message(m) for m in messages], "tools": json.dumps(tools or []), **meta}


# --- Parquet ----------------------------------------------------------------------------------


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Rows as a Parquet file (written whole, then moved into place)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"{path}: no rows to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
    return path


def read_parquet(path: str | Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
