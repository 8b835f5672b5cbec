"""The solution child: the reference's state_dict copied into ModelNew, or, under the relaxed policy,
ModelNew as constructed after the same seed, with the reason why; and a guarded forward on a GPU
task, where moving the model's own state to the device is not host compute."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from cuda_agent.harness.workers.child import Failure, guarded_call, load_weights
from cuda_agent.harness.workers.runtime import HostState


class Reference(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(16)
        self.scale = nn.Parameter(torch.randn(16))


class InferenceOnly(Reference):
    """The reference's names and shapes, its tensors made under torch.inference_mode() (as CUDA-L1's
    EfficientNetB2 moves itself to the GPU inside one): load_state_dict raises on each of them."""

    def __init__(self):
        with torch.inference_mode():
            super().__init__()


class Broadcast(Reference):
    """The reference's names and shapes, but one scale broadcast over every feature (an expanded
    view): load_state_dict cannot write into it, and raises before it writes."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(1).expand(16))


class Renamed(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(16, track_running_stats=False)
        self.scale = nn.Parameter(torch.randn(16))


@pytest.fixture
def state_path(tmp_path):
    ref = Reference()
    with torch.no_grad():
        ref.scale.copy_(torch.arange(16.0))
        ref.bn.running_mean.fill_(0.5)
    path = tmp_path / "state.pt"
    torch.save(ref.state_dict(), path)
    return str(path)


def test_matching_names_and_shapes_get_the_references_weights(state_path):
    m = Reference()
    assert load_weights(m, state_path) == load_weights(m, state_path, strict=False)
    assert load_weights(m, state_path).init == "state_dict" and load_weights(m, state_path).why == ""
    assert torch.equal(m.scale.detach(), torch.arange(16.0)) and bool((m.bn.running_mean == 0.5).all())


def test_a_copy_that_raised_after_writing_every_tensor_is_the_references_weights(state_path):
    """load_state_dict raises on inference tensors, but only after each copy was made: ModelNew
    holds the reference's values, which is what "state_dict" says (a strict solution too)."""
    for strict in (True, False):
        m = InferenceOnly()
        weights = load_weights(m, state_path, strict=strict)
        assert weights.init == "state_dict" and "inference tensor" in weights.why
        assert torch.equal(m.scale, torch.arange(16.0))


def test_weights_that_cannot_be_written_fall_back_to_same_seed_under_relaxed(state_path):
    weights = load_weights(Broadcast(), state_path, strict=False)
    assert weights.init == "same_seed"
    assert "could not be copied in (scale: unsupported operation" in weights.why


def test_weights_that_cannot_be_written_fail_strict_with_what_to_do(state_path):
    with pytest.raises(Failure) as e:
        load_weights(Broadcast(), state_path, strict=True)
    assert e.value.stage == "correctness"
    assert "could not be copied into ModelNew (scale:" in e.value.reason and "expanded views" in e.value.reason


def test_other_buffers_fall_back_to_same_seed_under_relaxed_and_say_which(state_path):
    weights = load_weights(Renamed(), state_path, strict=False)
    assert weights.init == "same_seed"
    assert "missing bn.bias" in weights.why and "unexpected norm.bias" in weights.why
    with pytest.raises(Failure, match="do not match the reference's state_dict"):
        load_weights(Renamed(), state_path, strict=True)


class Recurrent(nn.Module):
    """h0 held as KernelBench's LSTMs hold it: a plain attribute that forward moves to x's device."""

    def __init__(self):
        super().__init__()
        self.h0 = torch.randn(6, 10, 256)

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        return self.h0[0, 0, :4] + x


class Rewritten(Recurrent):
    """Results written into h0 on the host where no dispatch mode sees it (through numpy), then
    moved to the device as if they were the model's state."""

    def forward(self, x):
        self.h0.numpy()[...] *= 2
        return self.h0.to(x.device)[0, 0, :4] + x


# "meta" stands for the GPU here: the guard only reads devices.
META = torch.device("meta")


def test_forward_moving_its_own_state_to_the_device_is_not_host_compute():
    model = Recurrent()
    out = guarded_call(model, [torch.empty(4, device=META)], False, META, HostState(model))
    assert out.device == META and model.h0.device == META
    again = guarded_call(model, [torch.empty(4, device=META)], False, META, HostState(model))  # h0 moved already
    assert again.device == META


def test_state_rewritten_on_the_host_then_moved_is_host_compute():
    model = Rewritten()
    with pytest.raises(Failure, match="forward worked on the CPU"):
        guarded_call(model, [torch.empty(4, device=META)], False, META, HostState(model))
    with pytest.raises(Failure, match="forward worked on the CPU"):  # the state of no model: nothing is allowed
        guarded_call(Recurrent(), [torch.empty(4, device=META)], False, META, HostState())
