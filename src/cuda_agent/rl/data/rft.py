"""Rejection fine-tuning data: keep the good trajectories, write them as verl SFT Parquet.

Candidates come from two places:
- the warm-up's rollout dumps (`trainer.rollout_data_dir`: one JSON line per reply with its
  `score` and `gts`, the task's sha256): a single-turn conversation, the task's prompt and the reply;
- agent trajectories (`trajectory.jsonl` of `cuda-agent optimize`, or of the agentic loop): the whole
  conversation with its tool calls and outputs; its reward is the best the harness gave it.

A candidate is kept when its reward reaches `min_reward`, it has at most `max_turns` assistant
turns and `max_tokens` tokens (counted with the actor's tokenizer and chat template when given,
else estimated at 4 characters a token), its task is not KernelBench's, and it is not a copy of one
kept already. The SFT run itself is verl's trainer (the `rft` stage config), with the loss on the
assistant's tokens only.

What a trajectory shows is read here too: its best reward (`trajectory_reward`) and when it first
passed (`first_pass`: the turn, and which verification), and over many runs the share that had
passed by turn k (`pass_at_turns`: the collecting stages' outputs, the fill family's multi-turn form).
"""

from __future__ import annotations

import glob
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from cuda_agent.agent.tools import SCHEMAS
from cuda_agent.agent.trajectory import read_records
from cuda_agent.harness import EvalResult
from cuda_agent.journal import read_rows
from cuda_agent.rl.data.rows import KernelBenchGuard, clean_message, sft_row, write_parquet


@dataclass
class Candidate:
    task: str
    task_sha: str
    messages: list[dict[str, Any]]
    reward: float
    source: str                       # where it came from (file, or file:line)
    tools: list[dict[str, Any]] | None = None

    @property
    def turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")


@dataclass(frozen=True)
class RFTFilter:
    min_reward: float = 1.0
    max_turns: int = 150
    max_tokens: int = 32768


@dataclass
class RFTReport:
    candidates: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)   # reason -> count
    best_reward: float | None = None
    path: str | None = None

    def summary(self) -> str:
        why = ", ".join(f"{n} {reason}" for reason, n in self.dropped.most_common()) or "none dropped"
        best = f"; best reward {self.best_reward:g}" if self.best_reward is not None else ""
        return f"kept {self.kept} of {self.candidates} trajectories ({why}){best}"


# --- candidates -----------------------------------------------------------------------------------


def from_rollout_dumps(folder: str | Path, prompts_by_sha: dict[str, tuple[str, list[dict[str, Any]]]]
                       ) -> Iterable[Candidate]:
    """The warm-up's replies (verl's rollout dumps, `<step>.jsonl`), each with the prompt of its task."""
    for path in sorted(Path(folder).glob("*.jsonl"), key=lambda p: (len(p.stem), p.stem)):
        for i, row in enumerate(read_rows(path), 1):
            sha = row.get("gts")
            if sha not in prompts_by_sha or not isinstance(row.get("output"), str):
                continue
            name, prompt = prompts_by_sha[sha]
            yield Candidate(name, sha, [*prompt, {"role": "assistant", "content": row["output"]}],
                            float(row.get("score", -1.0)), f"{path}:{i}")


def trajectory_reward(records: list[dict[str, Any]]) -> float:
    """The best reward the harness gave a run (its verify and profile results, the final profile,
    the `end` record's best); -1 when it gave none."""
    rewards = []
    for r in records:
        found = r.get("harness") if r.get("type") in ("message", "final_evaluation") else r.get("best")
        if r.get("type") in ("message", "final_evaluation", "end") and isinstance(found, dict):
            if isinstance(found.get("reward"), (int, float)):
                rewards.append(found["reward"])
    return float(max(rewards)) if rewards else -1.0


def first_pass(records: list[dict[str, Any]]) -> tuple[int, int] | None:
    """When a run first passed: the turn of the reply whose verify or profile the harness accepted
    (correct, no harness error), and which of the run's verify and profile calls it was (from 1);
    None when none passed."""
    attempt = 0
    for r in records:
        found = r.get("harness") if r.get("type") == "message" else None
        result = found.get("result") if isinstance(found, dict) else None
        if not isinstance(result, dict):
            continue
        attempt += 1
        if result.get("correct") and not EvalResult.written_harness_error(result):
            return int(r.get("turn") or 0), attempt
    return None


def pass_at_turns(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Over runs (each its trajectory's records): the share that passed, and that had passed by turn
    k and by the k-th verification, for k from 1 to the latest first pass."""
    firsts = [first_pass(records) for records in runs]
    n = max(1, len(runs))
    last = max((f[0] for f in firsts if f), default=1)
    tries = max((f[1] for f in firsts if f), default=1)
    return {"runs": len(runs), "pass": round(sum(f is not None for f in firsts) / n, 4),
            "pass_at_turn": {str(k): round(sum(1 for f in firsts if f and f[0] <= k) / n, 4)
                             for k in range(1, last + 1)},
            "pass_at_attempt": {str(k): round(sum(1 for f in firsts if f and f[1] <= k) / n, 4)
                                for k in range(1, tries + 1)}}


def from_trajectory(path: str | Path) -> Candidate | None:
    """One agent run as a candidate (None when it holds no conversation)."""
    records = read_records(path)
    header = next((r for r in records if r.get("type") == "run"), {})
    messages = [clean_message(r["message"]) for r in records if r.get("type") == "message"]
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()  # a run cut short after a tool call: nothing to learn after the last reply
    if not messages or messages[0]["role"] != "system":
        return None
    return Candidate(str(header.get("task", "?")), str(header.get("task_sha256", "")), messages,
                     trajectory_reward(records), str(path), tools=SCHEMAS)


def trajectory_files(patterns: Iterable[str | Path]) -> list[Path]:
    """The trajectory.jsonl files named by paths, folders (searched below) and globs."""
    found: list[Path] = []
    for pattern in patterns:
        p = Path(pattern)
        if p.is_dir():
            found += sorted(p.rglob("trajectory.jsonl"))
        elif p.is_file():
            found.append(p)
        else:
            found += sorted(Path(m) for m in glob.glob(str(pattern), recursive=True))
    return list(dict.fromkeys(f.resolve() for f in found))


# --- the filter -----------------------------------------------------------------------------------


def chars_over_four(candidate: Candidate) -> int:
    return sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or [])) for m in candidate.messages) // 4


def chat_token_counter(model_path: str | Path) -> Callable[[Candidate], int]:
    """Counts a candidate's tokens as the SFT trainer will see them (the actor's chat template)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))

    def count(candidate: Candidate) -> int:
        ids = tokenizer.apply_chat_template(candidate.messages, tools=candidate.tools, tokenize=True,
                                            return_dict=True)["input_ids"]
        return len(ids)

    return count


def select(candidates: Iterable[Candidate], rule: RFTFilter, guard: KernelBenchGuard | None = None,
           count_tokens: Callable[[Candidate], int] = chars_over_four) -> tuple[list[Candidate], RFTReport]:
    """The candidates to fine-tune on, and what happened to the others."""
    report, kept, seen = RFTReport(), [], set()
    for c in candidates:
        report.candidates += 1
        report.best_reward = c.reward if report.best_reward is None else max(report.best_reward, c.reward)
        key = json.dumps([c.task_sha, c.messages], sort_keys=True)
        why = None
        if c.reward < rule.min_reward:
            why = f"reward below {rule.min_reward:g}"
        elif c.turns > rule.max_turns:
            why = f"over {rule.max_turns} turns"
        elif guard is not None and guard.why_excluded(c.task, sha=c.task_sha or None):
            why = "KernelBench tasks"
        elif key in seen:
            why = "duplicates"
        elif count_tokens(c) > rule.max_tokens:
            why = f"over {rule.max_tokens} tokens"
        if why:
            report.dropped[why] += 1
            continue
        seen.add(key)
        kept.append(c)
    report.kept = len(kept)
    return kept, report


def write_sft(kept: list[Candidate], path: str | Path) -> Path:
    """The kept conversations as verl SFT Parquet (messages, tools, and where each came from)."""
    rows = [sft_row(c.messages, c.tools, task=c.task, reward=c.reward, source=c.source) for c in kept]
    return write_parquet(rows, path)
