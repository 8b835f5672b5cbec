"""Backends: `cuda` (nvcc, the mission) and `cpu` (host C++ compiler). They share every code path
except the compiler and the timer."""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.devices import Device, default_device


@dataclass(frozen=True)
class Backend:
    device: Device
    arch: str | None = None  # e.g. "sm_90" on cuda; None on cpu

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"


def resolve_backend(device: str | None = None) -> Backend:
    """The backend for `device` (default: `default_device()`); cuda reads the GPU's own arch."""
    dev = device or default_device()
    if dev not in ("cuda", "cpu"):
        raise ValueError(f"unknown device {dev!r}: use 'cuda' or 'cpu'")
    if dev == "cpu":
        return Backend("cpu")
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for but torch sees no GPU; use --device cpu "
                           "to run the same checks with C++ extensions on the CPU")
    major, minor = torch.cuda.get_device_capability()
    return Backend("cuda", arch=f"sm_{major}{minor}")
