// Binding of the sanity family's kernel: checks inputs, allocates y, launches on the current stream.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"
#include "sanity.h"

static torch::Tensor sanity_forward(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias,
                                    int64_t config) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "sanity_forward: x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && scale.numel() == x.size(-1) && bias.numel() == x.size(-1),
              "sanity_forward: scale and bias need one value per feature (the last dimension of x)");
  TORCH_CHECK(scale.is_cuda() && bias.is_cuda() && scale.is_contiguous() && bias.is_contiguous(),
              "sanity_forward: scale and bias must be contiguous CUDA tensors");
  auto y = torch::empty_like(x);
  long long cols = x.size(-1);
  sanity_launch(x.data_ptr<float>(), scale.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                x.numel() / cols, cols, static_cast<int>(config), c10::cuda::getCurrentCUDAStream().stream());
  return y;
}

static void register_sanity(pybind11::module& m) {
  m.def("sanity_forward", &sanity_forward, "f(x * scale + bias)", pybind11::arg("x"), pybind11::arg("scale"),
        pybind11::arg("bias"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(sanity, register_sanity);
