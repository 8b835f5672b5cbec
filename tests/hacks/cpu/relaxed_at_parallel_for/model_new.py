import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

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
  at::parallel_for(0, rows, 16, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float v = xp[r * cols + c] * sp[c] + bp[c];
        yp[r * cols + c] = v > 0.f ? v : 0.f;
      }
  });
  return y;
}
"""

fused = load_inline(
    name="sbr_parallel_ext",
    cpp_sources=cpp_source,
    functions=["sbr_inline"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Rows spread over ATen's intra-op thread pool with at::parallel_for, where torch.set_num_threads is refused."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return fused.sbr_inline(x, self.scale, self.bias)
