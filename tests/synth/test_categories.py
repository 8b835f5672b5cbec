"""One categorizer for seeds, synthesized tasks and KernelBench: a task is classed by what defines it."""
from __future__ import annotations

import json
from collections import Counter

from cuda_agent.synth.categories import CORE, canonical, code_categories, code_operators, task_class
from cuda_agent.synth.compose import emit
from cuda_agent.synth.seedcheck import single_seed_program
from cuda_agent.synth.seeds import CURATED


def kernelbench(path) -> dict[str, dict]:
    return {r["name"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_kernelbench_tasks_are_classed_by_their_defining_operator(kernelbench_jsonl):
    rows = kernelbench(kernelbench_jsonl)
    expected = {"1_Square_matrix_multiplication_": "gemm", "19_ReLU": "activation", "33_BatchNorm": "norm",
                "42_Max_Pooling_2D": "pool", "47_Sum_reduction_over_a_dimension": "reduction",
                "95_CrossEntropyLoss": "loss", "97_ScaledDotProductAttention": "attention", "35_LSTM": "recurrent",
                "43_MinGPTCausalAttention": "attention", "9_ResNet18": "conv", "28_VisionTransformer": "attention",
                "1_MLP": "gemm"}
    got = {name: task_class(code_categories(rows[name]["code"])) for name in expected}
    assert got == expected


def test_kernelbench_level_2_is_all_gemm_or_conv_led(kernelbench_jsonl):
    rows = [r for r in kernelbench(kernelbench_jsonl).values() if r["level"] == 2]
    classes = Counter(task_class(code_categories(r["code"])) for r in rows)
    assert set(classes) <= set(CORE) and classes["conv"] > classes["gemm"] > 0


def test_every_curated_seed_reads_from_its_code_as_the_catalog_files_it():
    for seed in CURATED:
        code = emit(single_seed_program(seed))
        assert task_class(code_categories(code)) == canonical(seed.category), (seed.name, code_operators(code))


def test_sizes_computed_in_init_and_input_builders_are_not_operators():
    code = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.fc = nn.Linear(c, 2 * c)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(4, 8).abs() * 3]


def get_init_inputs():
    return [8]
'''
    assert code_operators(code) == [("Linear", "gemm"), ("relu", "activation")]
