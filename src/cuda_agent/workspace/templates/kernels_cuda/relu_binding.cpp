// Binding for the example kernel: checks inputs, allocates the output, launches on the current stream.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" void relu_launch(const float* x, float* y, long long n, int config, cudaStream_t stream);

static torch::Tensor relu_forward(const torch::Tensor& x, int64_t config) {
  TORCH_CHECK(x.is_cuda(), "relu_forward: x must be a CUDA tensor");
  TORCH_CHECK(x.is_contiguous(), "relu_forward: x must be contiguous");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: x must be float32");
  auto y = torch::empty_like(x);
  relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), static_cast<int>(config),
              c10::cuda::getCurrentCUDAStream().stream());
  return y;
}

static void register_relu(pybind11::module& m) {
  m.def("relu_forward", &relu_forward, "Element-wise ReLU (example kernel)",
        pybind11::arg("x"), pybind11::arg("config") = 0);
}

REGISTER_BINDING(relu, register_relu);
