"""rl.data.rows: tasks -> verl RL rows, the held-out split, KernelBench kept out of training, SFT rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.harness import check_solution  # noqa: E402
from cuda_agent.rl.data.rows import (AGENTIC, SINGLE_TURN, KernelBenchGuard, agent_messages, held_out,  # noqa: E402
                                     read_parquet, rl_rows, sft_row, single_turn_messages, split_tasks, write_parquet)
from cuda_agent.rl.workers.reward import extract_solution  # noqa: E402
from cuda_agent.tasks import Task, load_task  # noqa: E402

SBR = load_task("scale_bias_relu")
KB_MATMUL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a single square matrix multiplication (C = A * B)"""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 2048


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''


def task(name: str, code: str) -> Task:
    return Task(name=name, code=code, origin=f"test:{name}")


@pytest.fixture
def kernelbench(tmp_path) -> Path:
    path = tmp_path / "kernelbench.jsonl"
    path.write_text(json.dumps({"level": 1, "problem_id": 1, "name": "1_Square_matrix_multiplication_",
                                "code": KB_MATMUL}) + "\n")
    return path


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["prompt-for-cpu", "prompt-for-gpu"])
def test_the_reply_format_the_prompt_shows_passes_the_harness_static_checks(device):
    system = single_turn_messages(SBR, device)[0]["content"]
    code, why = extract_solution(system)   # the example in the prompt is itself a reply in the format
    assert code is not None, why
    report = check_solution({"model_new.py": code}, "strict")
    assert report.ok, report.reason
    assert ("cuda_sources" in code) == (device == "cuda")


def test_rows_carry_what_verl_and_the_reward_read():
    rows = rl_rows([SBR], SINGLE_TURN, "cpu", "train")
    row = rows[0]
    assert row["agent_name"] == SINGLE_TURN and row["data_source"] == "cuda_agent"
    assert row["reward_model"]["ground_truth"] == SBR.sha256
    assert row["extra_info"]["task"]["code"] == SBR.code and row["extra_info"]["task"]["name"] == SBR.name
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert SBR.code.strip() in row["prompt"][1]["content"]


def test_agentic_rows_start_as_the_agent_starts_a_run(tmp_path):
    messages = agent_messages(SBR, "cpu")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "SKILL" in messages[0]["content"] or "Skill" in messages[0]["content"]
    assert "scale_bias_relu" in messages[1]["content"]
    row = rl_rows([SBR], AGENTIC, "cpu", "train")[0]
    assert row["prompt"] == messages and row["agent_name"] == "cuda_agent"
    back = read_parquet(write_parquet([row], tmp_path / "agentic.parquet"))[0]
    assert back["prompt"] == messages and back["extra_info"]["task"]["code"] == SBR.code


def test_kernelbench_tasks_never_enter_training_by_name_by_code_or_as_near_copies(kernelbench):
    renamed = (KB_MATMUL.replace("Simple model", "A model").replace("N = 2048", "N = 1024")
               .replace("A: torch.Tensor, B: torch.Tensor", "X: torch.Tensor, Y: torch.Tensor").replace("A, B", "X, Y"))
    tasks = [
        task("1_Square_matrix_multiplication_", SBR.code.replace("4096", "4000")),   # KernelBench's name
        task("my_matmul", KB_MATMUL),                           # KernelBench's code, another name
        task("my_matmul_resized", renamed),                     # its code with other names, sizes, docstring
        task("scale_bias_relu", SBR.code),                      # a task of our own
    ]
    split = split_tasks(tasks, KernelBenchGuard.load(kernelbench), val_fraction=0.0)
    assert [t.name for t in split.train] == ["scale_bias_relu"] and not split.val
    assert set(split.excluded) == {"1_Square_matrix_multiplication_", "my_matmul", "my_matmul_resized"}
    assert "name" in split.excluded["1_Square_matrix_multiplication_"]


def test_held_out_split_depends_on_the_task_alone_not_on_order_or_dataset_size():
    tasks = [task(f"t{i}", SBR.code.replace("batch = 4096", f"batch = {4096 + i}")) for i in range(200)]
    guard = KernelBenchGuard()
    first = split_tasks(tasks[:120], guard, val_fraction=0.2, seed=3)
    again = split_tasks(list(reversed(tasks)), guard, val_fraction=0.2, seed=3)
    assert {t.name for t in first.val} <= {t.name for t in again.val}
    assert 20 <= len(again.val) <= 60   # about 20% of 200
    assert all(held_out(t, 0.2, 3) for t in again.val)
    assert {t.name for t in split_tasks(tasks, guard, 0.2, seed=4).val} != {t.name for t in again.val}


def test_duplicate_tasks_are_kept_once(kernelbench):
    split = split_tasks([SBR, task("copy", SBR.code)], KernelBenchGuard(), val_fraction=0.0)
    assert len(split.train) == 1
    # code first seen under a KernelBench name is still ours under its own name
    split = split_tasks([task("1_Square_matrix_multiplication_", SBR.code), SBR], KernelBenchGuard.load(kernelbench),
                        val_fraction=0.0)
    assert [t.name for t in split.train] == ["scale_bias_relu"]


def test_sft_parquet_keeps_empty_tool_arguments_and_each_tools_own_schema(tmp_path, tiny_model):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from cuda_agent.agent.tools import SCHEMAS
    from cuda_agent.rl.workers.sft_dataset import ToolSchemaSFTDataset

    messages = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Make it fast."},
                {"role": "assistant", "content": "Building.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "compile", "arguments": {}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "build succeeded"},
                {"role": "assistant", "content": "Done."}]
    path = write_parquet([sft_row(messages, SCHEMAS)], tmp_path / "sft.parquet")   # {} has no Parquet struct
    config = OmegaConf.create({"max_length": 4096, "truncation": "error", "messages_key": "messages",
                               "tools_key": "tools", "pad_mode": "no_padding"})
    data = ToolSchemaSFTDataset([str(path)], AutoTokenizer.from_pretrained(tiny_model), config)
    assert data.tools[0] == SCHEMAS   # not every tool with every other tool's properties as nulls
    item = data[0]
    tok = AutoTokenizer.from_pretrained(tiny_model)
    trained = tok.decode(item["input_ids"][item["loss_mask"].bool()])
    assert "Building." in trained and "Done." in trained and '"arguments": {}' in trained
    assert "build succeeded" not in trained and "Make it fast." not in trained   # tool output and prompt masked
