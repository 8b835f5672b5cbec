// Bindings of the scale-bias-relu kernel: a fused forward, the affine part alone, and an
// out-parameter variant that writes into a tensor the caller allocated.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"
#include "sbr.cuh"

static void check(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias,
                  const torch::Tensor& y) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && scale.numel() == x.size(-1) && bias.numel() == x.size(-1),
              "scale and bias must have one value per feature (the last dimension of x)");
  TORCH_CHECK(scale.is_cuda() && bias.is_cuda() && scale.is_contiguous() && bias.is_contiguous(),
              "scale and bias must be contiguous CUDA tensors");
  TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.numel() == x.numel() && y.scalar_type() == torch::kFloat32,
              "out must be a contiguous float32 CUDA tensor shaped like x");
}

static torch::Tensor run(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias,
                         torch::Tensor y, int relu, int64_t config) {
  check(x, scale, bias, y);
  long long cols = x.size(-1);
  sbr_launch(x.data_ptr<float>(), scale.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
             x.numel() / cols, cols, relu, static_cast<int>(config), static_cast<cudaStream_t>(0));  // the legacy default stream, not the current one
  return y;
}

static torch::Tensor sbr_forward(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias,
                                 int64_t config) {
  return run(x, scale, bias, torch::empty_like(x), 1, config);
}

static torch::Tensor sb_forward(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias,
                                int64_t config) {
  return run(x, scale, bias, torch::empty_like(x), 0, config);
}

static torch::Tensor sbr_out(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias,
                             torch::Tensor out, int64_t config) {
  return run(x, scale, bias, out, 1, config);
}

static void register_sbr(pybind11::module& m) {
  namespace py = pybind11;
  m.def("sbr_forward", &sbr_forward, "relu(x * scale + bias)", py::arg("x"), py::arg("scale"), py::arg("bias"),
        py::arg("config") = 0);
  m.def("sb_forward", &sb_forward, "x * scale + bias", py::arg("x"), py::arg("scale"), py::arg("bias"),
        py::arg("config") = 0);
  m.def("sbr_out", &sbr_out, "relu(x * scale + bias) written into out", py::arg("x"), py::arg("scale"),
        py::arg("bias"), py::arg("out"), py::arg("config") = 0);
}

REGISTER_BINDING(sbr, register_sbr);
