"""The runtime checks inside the solution child: the operator guard, the comparison of outputs
with the reference's, and the check that inputs come back unchanged."""

import math

import pytest
import torch

from cuda_agent.harness.workers.runtime import (HostState, OperatorGuard, changed_since, compare, flatten_outputs,
                                                inputs_unchanged, snapshot)


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


# --- relaxed policy: the runtime is the judge of released kernels' hack shapes ----------------------

def test_zeros_on_a_task_with_tiny_outputs_are_caught():
    e = [torch.relu(torch.randn(4096)) * 1e-4]
    assert compare(e, [torch.zeros(4096)], 1e-2, 1e-2).ok is False
    assert "below atol" in compare(e, [torch.zeros(4096)], 1e-2, 1e-2).reason
    assert not compare(e, [e[0] * 0.5], 1e-2, 1e-2).ok           # half the scale
    assert not compare(e, [e[0] + 1e-4 * torch.randn(4096)], 1e-2, 1e-2).ok  # noise as large as the signal


def test_tiny_outputs_of_honest_reduced_precision_pass_and_are_flagged():
    e = [torch.relu(torch.randn(4096)) * 1e-4]
    v = compare(e, [e[0].bfloat16().float()], 1e-2, 1e-2)
    assert v.ok and v.details["scale"] == "tiny"
    assert compare([torch.randn(4096)], [torch.zeros(4096)], 1e-2, 1e-2).details == {}  # not tiny: elementwise


def test_reference_at_rounding_noise_is_flagged_degenerate_not_failed():
    e = [torch.randn(4096) * 1e-8]
    v = compare(e, [torch.zeros(4096)], 1e-2, 1e-2)
    assert v.ok and v.details["scale"] == "degenerate"


def test_host_work_in_a_gpu_task_is_recorded():
    """On a CUDA task, an operator on a large host tensor means work moved to the CPU (the guard
    only reads devices, so this runs on the CPU by telling it the task is on the GPU)."""
    guard = OperatorGuard(strict=False, device_type="cuda")
    with guard:
        torch.relu(torch.randn(64, 128))
    assert "relu" in guard.host_ops
    small = OperatorGuard(strict=False, device_type="cuda")
    with small:
        torch.arange(16).sum()  # shapes and small constants on the host are honest
    assert small.host_ops == []
    assert OperatorGuard(strict=False, device_type="cpu").host_ops == []


class _Stateful(torch.nn.Module):
    """A model holding h0 as KernelBench's LSTMs do: a plain tensor attribute, left on the host."""

    def __init__(self):
        super().__init__()
        self.h0 = torch.randn(6, 10, 256)    # more than HOST_ELEMENTS
        self.kept = [torch.randn(8192)]      # state in a list counts too


# The device of these tests is "meta": the guard only reads devices, so a copy to meta stands for
# a copy to the GPU (a GPU task, told by device_type="cuda").
def _guarded(model: torch.nn.Module, fn) -> list[str]:
    guard = OperatorGuard(strict=False, device_type="cuda", state=HostState(model))
    with guard:
        fn()
    return guard.host_ops


def test_moving_the_models_own_state_to_the_device_is_not_host_work():
    m = _Stateful()
    assert _guarded(m, lambda: m.h0.to("meta")) == []
    assert _guarded(m, lambda: m.h0[:, :5].to("meta")) == []   # a view of it
    assert _guarded(m, lambda: m.kept[0].to("meta")) == []
    assert _guarded(m, lambda: torch.empty(6, 10, 256, device="meta").copy_(m.h0)) == []
    assert _guarded(_Stateful(), lambda: m.h0.to("meta")) != []  # another model's tensor is not this one's state


def test_host_compute_kept_as_an_attribute_then_moved_is_caught():
    """`self.out = (x.cpu() @ w)` then `.to(x.device)`: the attribute is new since construction."""
    m = _Stateful()
    state = HostState(m)
    m.out = torch.randn(6, 10, 256) * 2  # computed on the host after the state was taken
    guard = OperatorGuard(strict=False, device_type="cuda", state=state)
    with guard:
        m.out.to("meta")
    assert guard.host_ops == ["_to_copy"]


def test_state_written_on_the_host_after_construction_is_caught():
    """Host results written into the model's own tensor (here through numpy, which no dispatch
    mode sees) and then copied over: the state's bytes are no longer those it was constructed with."""
    m = _Stateful()
    state = HostState(m)
    m.h0.numpy()[0, 0, :3] = 1.0
    guard = OperatorGuard(strict=False, device_type="cuda", state=state)
    with guard:
        m.h0.to("meta")
    assert guard.host_ops == ["_to_copy"]


def test_work_on_state_that_stays_on_the_host_is_caught():
    m = _Stateful()
    assert _guarded(m, lambda: m.h0.double()) == ["_to_copy"]           # a copy that stays on the host
    assert _guarded(m, lambda: torch.relu(m.h0)) == ["relu"]
    other = torch.randn(6, 10, 256)
    assert _guarded(m, lambda: m.h0.copy_(other)) == ["copy_"]        # a host result written into it
    assert _guarded(m, lambda: m.h0.copy_(torch.zeros(256))) == ["copy_"]  # written from a small tensor


def test_output_subclass_and_device_are_named():
    class Lazy(torch.Tensor):
        pass

    assert "lazy output" in flatten_outputs(torch.randn(3).as_subclass(Lazy))
    assert "is on cpu, the task runs on meta" in flatten_outputs([torch.randn(3)], torch.device("meta"))
    assert isinstance(flatten_outputs((torch.randn(3),), torch.device("cpu")), list)


def test_output_changed_after_return_is_seen():
    out = torch.randn(8)
    copies = snapshot([out], torch.device("cpu"))
    assert not changed_since(copies, [out])
    out[3] = 0.5
    assert changed_since(copies, [out])
    nan = torch.full((4,), float("nan"))
    assert not changed_since(snapshot([nan], torch.device("cpu")), [nan])
