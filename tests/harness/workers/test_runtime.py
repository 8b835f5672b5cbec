"""The runtime checks inside the solution child: the operator guard, the comparison of outputs
with the reference's, and the check that inputs come back unchanged."""

import math

import pytest
import torch

from cuda_agent.harness.workers.runtime import OperatorGuard, compare, flatten_outputs, inputs_unchanged


def test_compute_operator_in_forward_is_caught_even_if_swallowed():
    guard = OperatorGuard(strict=True)
    x = torch.randn(4)
    with guard:
        y = torch.empty_like(x)
        y.view(2, 2).t()
        try:
            torch.relu(x)
        except RuntimeError:
            pass
    assert guard.violations == ["relu"]


def test_allocation_views_and_copies_are_allowed():
    guard = OperatorGuard(strict=True)
    x = torch.randn(4, 6)
    with guard:
        torch.empty(3, 3)
        torch.zeros_like(x)
        x.transpose(0, 1).contiguous()
        x.reshape(24)[:5]
        x.to(torch.float64)
    assert guard.violations == []


def test_relaxed_guard_records_but_allows():
    guard = OperatorGuard(strict=False)
    with guard:
        torch.randn(3).sum()
    assert guard.violations == [] and "sum" in guard.seen


def test_tolerance_shape_dtype_and_nan():
    e = [torch.linspace(-1, 1, 100)]
    assert compare(e, [e[0] + 0.009], 1e-2, 1e-2).ok
    assert not compare(e, [e[0] + 0.05], 1e-2, 1e-2).ok
    assert "shape" in compare(e, [e[0][:50]], 1e-2, 1e-2).reason
    assert "dtype" in compare(e, [e[0].double()], 1e-2, 1e-2).reason
    bad = e[0].clone()
    bad[3] = math.nan
    assert "NaN" in compare(e, [bad], 1e-2, 1e-2).reason
    assert "outputs" in compare(e, [e[0], e[0]], 1e-2, 1e-2).reason


def test_constant_output_where_reference_varies_fails():
    e = [torch.linspace(0, 0.015, 64)]  # varies more than 2*atol? no: within tolerance of a constant
    assert compare(e, [torch.full((64,), 0.0075)], 1e-2, 1e-2).ok
    e = [torch.linspace(-1, 1, 64)]
    assert not compare(e, [torch.zeros(64)], 1e-2, 1e-2).ok


def test_nan_where_reference_is_nan_is_fine_and_inf_must_match():
    e = [torch.tensor([1.0, math.nan, math.inf])]
    assert compare(e, [torch.tensor([1.0, math.nan, math.inf])], 1e-2, 1e-2).ok
    assert not compare(e, [torch.tensor([1.0, math.nan, -math.inf])], 1e-2, 1e-2).ok


def test_tensor_subclasses_and_non_tensors_are_refused():
    class Sneaky(torch.Tensor):
        pass

    assert isinstance(flatten_outputs(torch.randn(2).as_subclass(Sneaky)), str)
    assert isinstance(flatten_outputs((torch.randn(2), 3)), str)
    assert len(flatten_outputs((torch.randn(2), torch.randn(3)))) == 2


def test_in_place_input_edit_is_detected():
    x = torch.randn(5)
    before = [x.clone()]
    assert inputs_unchanged(before, [x]) is None
    x.add_(1)
    assert "modified in place" in inputs_unchanged(before, [x])
