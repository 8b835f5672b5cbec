// Binding of the GEMM + bias kernel: y = x @ w^T + b, allocated here.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

extern "C" void gemm_bias_launch(const float* x, const float* w, const float* b, float* y, long long M, long long N,
                                 long long K, int config);

static torch::Tensor gemm_bias_forward(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                       int64_t config) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous 2-D float32 CPU tensor");
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && w.size(1) == x.size(1), "w must be contiguous (N, K)");
  TORCH_CHECK(b.is_contiguous() && b.numel() == w.size(0), "b must have N values");
  auto y = torch::empty({x.size(0), w.size(0)}, x.options());
  gemm_bias_launch(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
                   w.size(0), x.size(1), static_cast<int>(config));
  return y;
}

static void register_gemm(pybind11::module& m) {
  m.def("gemm_bias_forward", &gemm_bias_forward, "x @ w^T + b", pybind11::arg("x"), pybind11::arg("w"),
        pybind11::arg("b"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(gemm_bias, register_gemm);
