// Binding of the row-sum kernel. `rows` < 0 means every row of x.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

extern "C" void rowsum_launch(const float* x, float* out, long long rows, long long cols, int config);

static torch::Tensor rowsum_forward(const torch::Tensor& x, int64_t rows, int64_t config) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous 2-D float32 CPU tensor");
  int64_t n = rows < 0 ? x.size(0) : rows;
  TORCH_CHECK(n <= x.size(0), "rows must not exceed x.size(0)");
  auto out = torch::empty({n}, x.options());
  rowsum_launch(x.data_ptr<float>(), out.data_ptr<float>(), n, x.size(1), static_cast<int>(config));
  return out;
}

static void register_rowsum(pybind11::module& m) {
  m.def("rowsum_forward", &rowsum_forward, "sum over the last dimension of the first `rows` rows",
        pybind11::arg("x"), pybind11::arg("rows") = -1, pybind11::arg("config") = 0);
}

REGISTER_BINDING(rowsum, register_rowsum);
