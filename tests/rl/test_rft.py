"""rl.data.rft: which trajectories rejection fine-tuning keeps, and the SFT Parquet it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.agent.tools import SCHEMAS  # noqa: E402
from cuda_agent.rl.data import rft  # noqa: E402
from cuda_agent.rl.data.rows import KernelBenchGuard, read_parquet  # noqa: E402

RUN = Path(__file__).resolve().parent / "fixtures" / "scale_bias_relu.cpu.trajectory.jsonl"
PROMPT = [{"role": "system", "content": "Write kernels."}, {"role": "user", "content": "Make sbr fast."}]


def candidate(reward: float, turns: int = 1, task: str = "sbr", text: str = "ok") -> rft.Candidate:
    messages = list(PROMPT)
    for i in range(turns):
        messages += [{"role": "assistant", "content": f"{text} {i}"}]
    return rft.Candidate(task, f"sha-{task}", messages, reward, "test")


def test_a_recorded_agent_run_is_one_candidate_with_its_best_reward():
    c = rft.from_trajectory(RUN)
    assert c.task == "scale_bias_relu" and c.reward == 3.0 and c.turns == 7
    assert c.messages[0]["role"] == "system" and c.messages[-1]["role"] == "assistant"
    assert c.tools == SCHEMAS
    calls = [call for m in c.messages for call in m.get("tool_calls", [])]
    assert calls and all(isinstance(call["function"]["arguments"], str) for call in calls)


def test_a_run_cut_after_a_tool_call_ends_at_its_last_reply(tmp_path):
    lines = RUN.read_text().splitlines()
    cut = [l for l in lines if json.loads(l).get("type") != "end"][:-1]   # drop the final reply and the end
    assert json.loads(cut[-1])["message"]["role"] == "tool"
    (tmp_path / "trajectory.jsonl").write_text("\n".join(cut) + "\n")
    c = rft.from_trajectory(tmp_path / "trajectory.jsonl")
    assert c.messages[-1]["role"] == "assistant" and c.reward == 3.0


def test_kept_by_reward_turns_and_tokens_and_each_drop_counted():
    pool = [candidate(3.0), candidate(1.0, text="also"), candidate(-1.0, text="bad"), candidate(2.0, turns=9),
            candidate(3.0, text="x" * 4000)]
    kept, report = rft.select(pool, rft.RFTFilter(min_reward=1.0, max_turns=5, max_tokens=500))
    assert [c.messages[-1]["content"] for c in kept] == ["ok 0", "also 0"]
    assert report.kept == 2 and report.candidates == 5
    assert report.dropped == {"reward below 1": 1, "over 5 turns": 1, "over 500 tokens": 1}


def test_duplicates_and_kernelbench_tasks_are_dropped(tmp_path):
    bench = tmp_path / "kb.jsonl"
    bench.write_text(json.dumps({"name": "19_ReLU", "code": "import torch\n"}) + "\n")
    guard = KernelBenchGuard(names={"relu"})
    kept, report = rft.select([candidate(3.0), candidate(3.0), candidate(3.0, task="19_ReLU")], rft.RFTFilter(),
                              guard)
    assert len(kept) == 1 and report.dropped == {"duplicates": 1, "KernelBench tasks": 1}


def test_warmup_replies_become_single_turn_conversations(tmp_path):
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    (dumps / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"input": "...", "output": "```python\nclass ModelNew: ...\n```", "gts": "sha1", "score": 3.0, "step": 1},
        {"input": "...", "output": "no idea", "gts": "sha1", "score": -1.0, "step": 1},
        {"input": "...", "output": "other task", "gts": "unknown", "score": 3.0, "step": 1}]))
    found = list(rft.from_rollout_dumps(dumps, {"sha1": ("sbr", PROMPT)}))
    assert [c.reward for c in found] == [3.0, -1.0]
    assert found[0].messages == [*PROMPT, {"role": "assistant", "content": "```python\nclass ModelNew: ...\n```"}]


def test_sft_parquet_holds_the_kept_conversations(tmp_path):
    kept, _ = rft.select([rft.from_trajectory(RUN), candidate(2.0)], rft.RFTFilter())
    rows = read_parquet(rft.write_sft(kept, tmp_path / "sft.parquet"))
    assert len(rows) == 2 and rows[0]["task"] == "scale_bias_relu" and rows[0]["reward"] == 3.0
    assert json.loads(rows[0]["tools"]) == SCHEMAS and json.loads(rows[1]["tools"]) == []
    assert [m["role"] for m in rows[0]["messages"]][:3] == ["system", "user", "assistant"]


def test_trajectory_files_are_found_in_folders_and_by_glob(tmp_path):
    for name in ("a", "b"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "trajectory.jsonl").write_text(RUN.read_text())
    assert len(rft.trajectory_files([tmp_path / "runs"])) == 2
    assert len(rft.trajectory_files([str(tmp_path / "runs" / "*" / "trajectory.jsonl"), tmp_path / "runs"])) == 2


def test_tokens_are_counted_with_the_actors_chat_template(tiny_model):
    count = rft.chat_token_counter(tiny_model)
    c = rft.from_trajectory(RUN)
    n = count(c)
    assert n > rft.chars_over_four(c) / 4 and n > 1000   # the tool schemas and every message
