#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include "../binding_registry.h"
extern "C" void sbr_launch(const float* x, const float* s, const float* b, float* y, long long rows, long long cols, int config);
static torch::Tensor sbr_forward(const torch::Tensor& x, const torch::Tensor& s, const torch::Tensor& b) {
  TORCH_CHECK(x.is_contiguous() && x.dim() == 2, "x");
  auto y = torch::empty_like(x);
  sbr_launch(x.data_ptr<float>(), s.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1), 0);
  return y;
}
static void reg(pybind11::module& m) { m.def("sbr_forward", &sbr_forward); }
REGISTER_BINDING(sbr, reg);
