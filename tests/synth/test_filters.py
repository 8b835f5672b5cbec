from __future__ import annotations

import json

import pytest

from cuda_agent.synth.execute import Executor, Limits
from cuda_agent.synth.filters import Window, check_stochastic_source, degenerate_reason, scaled_batch
from cuda_agent.synth.similarity import ReferenceIndex, fingerprint

from .conftest import FAST_TIMING, KERNELBENCH_JSONL

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        {body}


batch_size = 8
features = 32


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
"""


def task(body: str) -> str:
    return TASK.replace("{body}", body)


def test_random_ops_in_the_source_are_rejected_but_random_inputs_are_fine():
    assert check_stochastic_source(task("return torch.nn.functional.dropout(self.linear(x))")).filter == "stochastic"
    assert check_stochastic_source(task("return self.linear(x) + torch.rand_like(x)")) is not None
    assert check_stochastic_source(task("return self.linear(x)")) is None


def test_generators_seeds_and_other_libraries_random_numbers_are_named_whole():
    for body in ("return self.linear(x) + 1e-3 * torch.rand(1)", "return self.linear(x)[:, torch.randperm(32)]",
                 "return self.linear(x) + torch.normal(0.0, 1.0, (1,))",
                 "g = torch.Generator(); return self.linear(x) + torch.randn(1, generator=g)",
                 "return self.linear(x) * float(__import__('numpy').random.rand())"):
        assert check_stochastic_source(task(body)) is not None, body
    assert check_stochastic_source("import random\n" + task("return self.linear(x)")) is not None
    assert check_stochastic_source("from numpy import random\n" + task("return self.linear(x)")) is not None
    for body in ("return torch.nn.functional.normalize(self.linear(x))", "operand = self.linear(x); return operand"):
        assert check_stochastic_source(task(body)) is None, body


def test_degenerate_outputs_are_named():
    ok = {"finite": True, "nonzero": 1.0, "std": 0.5, "absmax": 2.0}
    assert degenerate_reason([ok]) is None
    assert "NaN" in degenerate_reason([{**ok, "finite": False}])
    assert "all zero" in degenerate_reason([{**ok, "nonzero": 0.0}])
    assert "constant" in degenerate_reason([{**ok, "std": 0.0}])


def test_a_scalar_loss_is_not_degenerate_unless_zero_or_not_finite():
    loss = {"finite": True, "numel": 1, "nonzero": 1.0, "std": 0.0, "absmax": 0.7}
    assert degenerate_reason([loss]) is None
    assert "all zero" in degenerate_reason([{**loss, "nonzero": 0.0}])
    assert "NaN" in degenerate_reason([{**loss, "finite": False}])


def test_window_and_batch_scaling():
    w = Window.parse("1,100")
    assert w.contains(1.0) and not w.contains(100.5) and w.target_ms == pytest.approx(10.0)
    assert scaled_batch(16, 100.0, w, 1024) == 2 and scaled_batch(16, 1.0, w, 1024) == 160
    assert scaled_batch(16, 1.0, w, 64) == 64 and scaled_batch(2, 1000.0, w, 64) is None
    with pytest.raises(ValueError, match="LOW,HIGH"):
        Window.parse("fast")


@pytest.mark.skipif(not KERNELBENCH_JSONL.exists(), reason="needs the KernelBench JSONL")
def test_a_renamed_resized_kernelbench_task_is_found_as_a_near_copy():
    rows = [json.loads(line) for line in KERNELBENCH_JSONL.read_text().splitlines()]
    row = next(r for r in rows if r["name"].startswith("12_Gemm_Multiply_LeakyReLU"))
    disguised = (row["code"].replace("batch_size", "bs")
                 .replace("in_features", "fin").replace("128", "256").replace('"""', "'''"))
    near = ReferenceIndex.from_jsonl(KERNELBENCH_JSONL).nearest(disguised)
    assert near.name.endswith(row["name"]) and near.score > 0.9
    assert fingerprint(disguised) == fingerprint(row["code"])


@pytest.mark.slow
def test_execution_filters_reject_hangs_crashes_randomness_and_zeros(tmp_path):
    ex = Executor(tmp_path / "w", limits=Limits(eager_s=20))
    try:
        def eager(body):  # a size step, then the checks where it ran
            reply = ex.request({"op": "eager", "code": task(body), "device": "cpu", "plan": FAST_TIMING}, 20)
            return ex.request({"op": "checks"}, 20) if reply["ok"] else reply
        hidden_rng = "return self.linear(x) + getattr(torch, 'ra' + 'nd_like')(x)"
        assert eager(hidden_rng)["filter"] == "stochastic"
        assert eager("return self.linear(x) * 0")["reason"].endswith("all zero")
        assert eager("return self.linear(x)[:, :0].sum() * x")["filter"] == "degenerate"
        crashed = eager("__import__('os').abort()")
        assert crashed["ok"] is False and "crashed" in crashed["reason"]
        ex.limits = Limits(eager_s=3)
        hung = ex.request({"op": "eager", "code": task("while True: pass"), "device": "cpu", "plan": FAST_TIMING}, 3)
        assert "timed out" in hung["reason"]
        good = ex.request({"op": "eager", "code": task("return torch.relu(self.linear(x))"), "device": "cpu",
                           "plan": FAST_TIMING}, 20)
        assert good["ok"] and good["eager_ms"] > 0
        assert ex.request({"op": "checks"}, 20)["ok"]
    finally:
        ex.clean()
