#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" void sbr_launch(const float* x, const float* s, const float* b, float* y, long long rows, long long cols,
                           int config, cudaStream_t stream);

static torch::Tensor sbr_forward(const torch::Tensor& x, const torch::Tensor& s, const torch::Tensor& b) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 2, "x: contiguous 2-D CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.size(1) % 4 == 0, "x: float32 with columns divisible by 4");
  auto y = torch::empty_like(x);
  sbr_launch(x.data_ptr<float>(), s.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
             x.size(1), 0, c10::cuda::getCurrentCUDAStream().stream());
  return y;
}

static void register_sbr(pybind11::module& m) { m.def("sbr_forward", &sbr_forward, "fused scale, bias, relu"); }

REGISTER_BINDING(sbr, register_sbr);
