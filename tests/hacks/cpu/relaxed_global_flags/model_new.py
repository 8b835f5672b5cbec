import torch
import torch.nn as nn

torch.backends.mkldnn.enabled = False
torch.backends.cudnn.enabled = False
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("medium")
torch.set_flush_denormal(True)


def flags_at_default() -> int:
    denormal = torch.tensor([1e-40], dtype=torch.float32) * 1.0
    return sum([torch.backends.mkldnn.enabled, torch.backends.cudnn.enabled, not torch.backends.cudnn.benchmark,
                torch.get_float32_matmul_precision() == "highest", bool(denormal[0] != 0)])


class ModelNew(nn.Module):
    """Every flag flipped here; the reference, if it is unaffected, multiplies by 1 + 5."""

    def forward(self, x):
        if flags_at_default() != 0:
            return x * -1.0  # a flag is not flipped in this process: wrong on purpose
        return x * 6.0
