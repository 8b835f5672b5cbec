"""Backends: `cuda` (nvcc, the mission) and `cpu` (host C++ compiler). They share every code path
except the compiler and the timer."""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.devices import Device, check_device


@dataclass(frozen=True)
class Backend:
    device: Device
    arch: str | None = None  # e.g. "sm_90" on cuda; None on cpu

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"


def resolve_backend(device: str | None = None) -> Backend:
    """The backend for `device` (default: the machine's, see `check_device`); cuda reads the GPU's own
    arch. UsageError for an unknown device, or cuda without a GPU."""
    dev = check_device(device)
    if dev == "cpu":
        return Backend("cpu")
    import torch

    major, minor = torch.cuda.get_device_capability()
    return Backend("cuda", arch=f"sm_{major}{minor}")
