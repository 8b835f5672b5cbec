"""The solution child: a guarded forward on a GPU task, where moving the model's own state to the
device is not host compute."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from cuda_agent.harness.workers.child import Failure, guarded_call
from cuda_agent.harness.workers.runtime import HostState


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
