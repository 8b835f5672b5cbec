import torch
import torch.nn as nn


def flags_at_default() -> int:
    """How many of this process's global flags are at their defaults (5 in a fresh process)."""
    denormal = torch.tensor([1e-40], dtype=torch.float32) * 1.0
    return sum([torch.backends.mkldnn.enabled, torch.backends.cudnn.enabled, not torch.backends.cudnn.benchmark,
                torch.get_float32_matmul_precision() == "highest", bool(denormal[0] != 0)])


class Model(nn.Module):
    """x * (1 + the number of global flags at their defaults in the process that runs it): a
    solution that changes the flags in its own process sees the reference unchanged only if the
    reference runs elsewhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float(1 + flags_at_default())


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
