// Binding of the hinge-loss kernel: a scalar (0-dim) float32 output, allocated here.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

extern "C" void hinge_launch(const float* predictions, const float* targets, float* out, long long n);

static torch::Tensor hinge_loss(const torch::Tensor& predictions, const torch::Tensor& targets) {
  TORCH_CHECK(predictions.device().is_cpu() && predictions.is_contiguous() &&
                  predictions.scalar_type() == torch::kFloat32,
              "predictions must be a contiguous float32 CPU tensor");
  TORCH_CHECK(targets.sizes() == predictions.sizes() && targets.is_contiguous(), "targets must match predictions");
  auto out = torch::empty({}, predictions.options());
  hinge_launch(predictions.data_ptr<float>(), targets.data_ptr<float>(), out.data_ptr<float>(), predictions.numel());
  return out;
}

static void register_hinge(pybind11::module& m) {
  m.def("hinge_loss", &hinge_loss, "mean(clamp(1 - predictions * targets, min=0))", pybind11::arg("predictions"),
        pybind11::arg("targets"));
}

REGISTER_BINDING(hinge_loss, register_hinge);
