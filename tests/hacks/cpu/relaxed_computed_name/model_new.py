import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BUILD_DIR = os.path.join(os.path.expanduser("~"), ".cache", "sbr_build")
os.makedirs(BUILD_DIR, exist_ok=True)
os.environ["MAX_JOBS"] = "2"

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor sbr_inline(torch::Tensor x, torch::Tensor scale, torch::Tensor bias) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 matrix");
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* sp = scale.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t rows = x.size(0), cols = x.size(1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = xp[r * cols + c] * sp[c] + bp[c];
      yp[r * cols + c] = v > 0.f ? v : 0.f;
    }
  return y;
}
"""

fused = load_inline(
    name=f"sbr_ext_{os.getpid()}",
    cpp_sources=cpp_source,
    functions=["sbr_inline"],
    build_directory=BUILD_DIR,
    verbose=os.environ.get("VERBOSE_BUILD", "0") == "1",
)


class ModelNew(nn.Module):
    """One load_inline module whose name is computed when the file runs."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return fused.sbr_inline(x, self.scale, self.bias)
