#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

template <typename scalar_t>
static void sbr_kernel(const scalar_t* x, const scalar_t* scale, const scalar_t* bias, scalar_t* y, int64_t rows,
                       int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      scalar_t v = x[r * cols + c] * scale[c] + bias[c];
      y[r * cols + c] = v > scalar_t(0) ? v : scalar_t(0);
    }
}

static torch::Tensor sbr_dispatch(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && scale.is_contiguous() && bias.is_contiguous(),
              "x must be a contiguous matrix, scale and bias contiguous vectors");
  TORCH_CHECK(scale.scalar_type() == x.scalar_type() && bias.scalar_type() == x.scalar_type(),
              "x, scale and bias must share one dtype");
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "sbr_dispatch", [&] {
    sbr_kernel<scalar_t>(x.data_ptr<scalar_t>(), scale.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(),
                         y.data_ptr<scalar_t>(), x.size(0), x.size(1));
  });
  return y;
}

static void register_sbr_dispatch(pybind11::module& m) { m.def("sbr_dispatch", &sbr_dispatch); }

REGISTER_BINDING(sbr_dispatch, register_sbr_dispatch);
