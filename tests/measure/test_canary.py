"""The canary kernel each process of a timing run times in its own context (issue 24's per-process modes)."""

from __future__ import annotations

import pytest
import torch

from cuda_agent.measure import canary_ms


def test_off_the_gpu_there_is_no_canary():
    assert canary_ms(torch.device("cpu")) is None


@pytest.mark.cuda
def test_on_the_device_the_canary_is_a_memory_bound_kernels_time():
    """64 MB read and 64 MB written: tens of microseconds at HBM speeds, the same in two runs within 10%."""
    a, b = canary_ms(torch.device("cuda")), canary_ms(torch.device("cuda"))
    assert 0.005 < a < 5 and abs(a / b - 1) < 0.1, (a, b)
