// Binding of the lower-triangular matmul kernel: C = tril(A @ B), allocated here.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

extern "C" void tril_matmul_launch(const float* a, const float* b, float* c, long long n);

static torch::Tensor tril_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.device().is_cpu() && a.dim() == 2 && a.size(0) == a.size(1) && a.is_contiguous() &&
                  a.scalar_type() == torch::kFloat32,
              "A must be a contiguous square float32 CPU matrix");
  TORCH_CHECK(b.sizes() == a.sizes() && b.is_contiguous() && b.scalar_type() == torch::kFloat32,
              "B must be a contiguous float32 matrix shaped like A");
  auto c = torch::empty_like(a);
  tril_matmul_launch(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0));
  return c;
}

static void register_tril(pybind11::module& m) {
  m.def("tril_matmul", &tril_matmul, "tril(A @ B) for lower-triangular A and B", pybind11::arg("a"),
        pybind11::arg("b"));
}

REGISTER_BINDING(tril_matmul, register_tril);
